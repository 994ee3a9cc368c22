package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// serverPorts finds the port argument of each server command line.
func serverPorts(servers [][]string) []int {
	var ports []int
	for _, s := range servers {
		for i, a := range s {
			if a == "-p" && i+1 < len(s) {
				if n, err := strconv.Atoi(s[i+1]); err == nil {
					ports = append(ports, n)
				}
			}
		}
		// connrate.py takes "server HOST PORT": the port is last.
		if len(s) >= 3 && s[len(s)-3] == "server" {
			if n, err := strconv.Atoi(s[len(s)-1]); err == nil {
				ports = append(ports, n)
			}
		}
	}
	return ports
}

// waitListening polls `ss` inside the site's namespace until every port
// has a listening TCP socket. Listening is checked from outside rather
// than by connecting, so the servers never see a stray connection.
func waitListening(ctx context.Context, s *site, ports []int) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, err := runCmd(ctx, netns.Command(s.NSPath, "ss", "-Hltn"))
		if err != nil {
			return fmt.Errorf("check bench servers in %s: %w", s.Label, err)
		}
		missing := missingPorts(string(out), ports)
		if len(missing) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench servers in %s not listening on port(s) %v after 20 s; is sockperf/iperf3/python3 installed?", s.Label, missing)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// missingPorts returns the ports that have no listener in `ss -Hltn` output.
func missingPorts(ss string, ports []int) []int {
	listening := map[int]bool{}
	for _, line := range strings.Split(ss, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 {
			continue
		}
		local := f[3]
		if i := strings.LastIndexByte(local, ':'); i >= 0 {
			if n, err := strconv.Atoi(local[i+1:]); err == nil {
				listening[n] = true
			}
		}
	}
	var missing []int
	for _, p := range ports {
		if !listening[p] {
			missing = append(missing, p)
		}
	}
	return missing
}
