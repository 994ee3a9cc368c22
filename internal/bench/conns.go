package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// The FreeFlow paths are checked, never assumed: while a client runs, the
// bench asks `freeflow conns -o json` which path the connections between
// that client's container and its server's container took.

// connEntry is one line of `freeflow conns -o json`.
type connEntry struct {
	Local           string `json:"local"`
	Remote          string `json:"remote"`
	LocalContainer  string `json:"local_container"`
	RemoteContainer string `json:"remote_container"`
	Path            string `json:"path"`
	Reason          string `json:"reason"`
}

// ParseConns reads `freeflow conns -o json`.
func ParseConns(out []byte) ([]connEntry, error) {
	var cs []connEntry
	if err := json.Unmarshal(out, &cs); err != nil {
		return nil, fmt.Errorf("parse `freeflow conns -o json` output: %w", err)
	}
	return cs, nil
}

// pathCheck collects what `freeflow conns` showed for one sample's
// client/server container pairs.
type pathCheck struct {
	want     string
	launcher string             // overlay reason of connections to a launcher outside the containers: ignored
	pairs    map[[2]string]bool // {client, server} containers
	seen     map[string]int     // path (with reason) -> times seen
	err      error
}

func newPathCheck(want string) *pathCheck {
	return &pathCheck{want: want, pairs: map[[2]string]bool{}, seen: map[string]int{}}
}

// add counts the entries that belong to the checked pairs: the client's
// end, as the client's host agent reports it.
func (c *pathCheck) add(cs []connEntry) {
	for _, e := range cs {
		if !c.pairs[[2]string{e.LocalContainer, e.RemoteContainer}] {
			continue
		}
		key := e.Path
		if e.Reason != "" {
			key += " (" + e.Reason + ")"
		}
		c.seen[key]++
	}
}

// verdict says why the sample is suspect, or "" if every connection seen
// took the expected path.
func (c *pathCheck) verdict() string {
	if c.err != nil {
		return "path not checked: " + c.err.Error()
	}
	if len(c.seen) == 0 {
		return fmt.Sprintf("freeflow conns showed none of this run's connections; expected path %s not confirmed", c.want)
	}
	var wrong []string
	for _, k := range sortedKeys(c.seen) {
		// A reason on a fast path says why not a faster one (unix: shm
		// turned off); only the path decides.
		if path, _, _ := strings.Cut(k, " ("); path != c.want {
			wrong = append(wrong, fmt.Sprintf("%s ×%d", k, c.seen[k]))
		}
	}
	if len(wrong) == 0 {
		return ""
	}
	return fmt.Sprintf("connections took path %s, expected %s", strings.Join(wrong, ", "), c.want)
}

// connsPoll is how often the bench asks while a client runs: often enough
// to see short-lived connections (connrate), rarely enough to cost little.
// Every path's client runs under the same polls, checked or not (a nil
// pathCheck): a poll costs CPU (a CLI process, the agents' listing), and
// only the FreeFlow paths paying it would bias their figures (connrate's
// clients and servers keep both cores busy).
const connsPoll = 400 * time.Millisecond

// watchConns polls `freeflow conns` until stop is closed, then returns;
// with c nil it only polls.
func watchConns(ctx context.Context, cli CLI, c *pathCheck, stop <-chan struct{}) {
	t := time.NewTicker(connsPoll)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		case <-t.C:
		}
		out, err := cli.run(ctx, "conns", "-o", "json")
		if c == nil {
			continue
		}
		if err == nil {
			var cs []connEntry
			if cs, err = ParseConns(out); err == nil {
				c.add(cs)
				continue
			}
		}
		c.err = err
		return
	}
}
