package cluster

import (
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// killGrace is how long processes get to exit after SIGTERM before SIGKILL.
const killGrace = 2 * time.Second

// stopProcesses sends SIGTERM to every process in the namespaces, waits up
// to killGrace for them to exit, then SIGKILLs what is left and waits for it
// to be gone. It reports the pids that survived.
func stopProcesses(nsPaths []string) []int {
	if len(netns.Signal(nsPaths, syscall.SIGTERM, killGrace)) == 0 {
		return nil
	}
	return netns.Signal(nsPaths, syscall.SIGKILL, killGrace)
}
