package bench

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// serverStartLimit bounds the servers' start-up: PostgreSQL's initdb and
// pgbench's table load take a few seconds on a busy machine.
const serverStartLimit = 60 * time.Second

// waitListening polls `ss` inside the site's namespace until every port
// has a listening TCP socket. Listening is checked from outside rather
// than by connecting, so the servers never see a stray connection.
func waitListening(ctx context.Context, s *site, ports []int) error {
	deadline := time.Now().Add(serverStartLimit)
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
			return fmt.Errorf("bench servers in %s not listening on port(s) %v after %s; see server-PORT.log in its $D; are the tools installed (scripts/install-deps.sh)?", s.Label, missing, serverStartLimit)
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
