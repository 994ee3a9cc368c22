package runtimewrap

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"

	"github.com/freeflow-net/freeflow/internal/ffspec"
	"github.com/freeflow-net/freeflow/internal/netns"
)

// verbsTreeDir is where, in the bundle, the wrapper writes a container's
// verbs device tree: the bundle lives as long as the container, and goes
// with it.
const verbsTreeDir = "freeflow-verbs"

// giveVerbs gives the container its virtual verbs device, as `freeflow
// run` does: the device's identity is derived from the pod's address,
// read from the network namespace the CNI plugins set up (a container in
// a namespace without an address, or none named, gets no device).
func giveVerbs(s *spec, bundle, provider string) error {
	if st, err := os.Stat(provider); err != nil || !st.Mode().IsRegular() {
		return fmt.Errorf("the FreeFlow verbs provider %s is missing on this node (run `freeflowd install`, or opt the pod out with the annotation %s: \"off\")", provider, OptOutAnnotation)
	}
	ip, ifname, err := podAddress(s)
	if err != nil || ip == "" {
		return err
	}
	tree := filepath.Join(bundle, verbsTreeDir)
	if err := ffspec.WriteVerbsTree(tree, ip, ifname); err != nil {
		return err
	}
	mounts, env := ffspec.Verbs(tree, provider)
	s.env = append(s.env, env...)
	for _, m := range mounts {
		raw, _ := json.Marshal(m)
		s.mounts = append(s.mounts, raw)
	}
	return nil
}

// podAddress returns the IPv4 address of the container's network
// namespace (the first of an interface other than loopback) and its
// interface, "" when its namespace is new (no path) or has none.
func podAddress(s *spec) (ip, ifname string, err error) {
	var linux struct {
		Namespaces []struct{ Type, Path string } `json:"namespaces"`
	}
	if err := decodeField(s.top, "linux", &linux); err != nil {
		return "", "", err
	}
	for _, ns := range linux.Namespaces {
		if ns.Type != "network" || ns.Path == "" {
			continue
		}
		err := netns.Do(ns.Path, func() error {
			ip, ifname = firstIPv4()
			return nil
		})
		if err != nil {
			return "", "", fmt.Errorf("read the pod's address for its verbs device: %w", err)
		}
	}
	return ip, ifname, nil
}

func firstIPv4() (ip, ifname string) {
	ifs, _ := net.Interfaces()
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := i.Addrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil {
				return n.IP.String(), i.Name
			}
		}
	}
	return "", ""
}
