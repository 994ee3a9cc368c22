// Command pause is the pod sandbox's process (the kubelet's "pause"
// container): it holds the pod's namespaces open, reaps the zombies of a
// shared PID namespace and exits on SIGINT or SIGTERM. Built static
// (CGO_ENABLED=0) into the harness's local pause image, since no registry
// is reachable to pull registry.k8s.io/pause.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range sigs {
		if sig != syscall.SIGCHLD {
			os.Exit(0)
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
