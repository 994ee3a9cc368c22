package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
)

// Connections that live shorter than the conns poll (connrate's) may never
// show in `freeflow conns`; the agents' counters in `freeflow status -o
// json` catch them. The bench's cluster runs nothing but the bench, and
// only FreeFlow containers talk to the agents, so what the counters gained
// while a FreeFlow path's client ran are that client's connections.

// Metrics the runner takes from the counters (see also mPathEnds).
const (
	mFastShare   = "fast_pct"     // FastShare: % of the ends decided that took a fast path
	mOverlayEnds = "overlay_ends" // FallbackReasons: ends put on the overlay
)

// connCounters are the agents' connection counters, summed over hosts.
type connCounters struct {
	// Paths counts connection ends per fast path ("unix", "host-tcp",
	// "shm", ...): every counter the agent reports besides its totals,
	// so a channel added to the agent is counted without a change here.
	Paths    map[string]uint64
	Fallback uint64
	Reasons  map[string]uint64
}

// notPath reports whether counter k of `freeflow status` is not a path:
// a total, a byte count or a table of reasons.
func notPath(k string) bool {
	return k == "fast_path" || k == "fallback" || k == "live" || strings.HasSuffix(k, "_bytes") || strings.HasSuffix(k, "_reasons")
}

// ParseStatusCounters sums the counters of every host in `freeflow status
// -o json`; a host whose agent did not answer is an error.
func ParseStatusCounters(out []byte) (connCounters, error) {
	var st struct {
		Hosts []struct {
			Name  string `json:"name"`
			Agent *struct {
				Connections map[string]json.RawMessage `json:"connections"`
			} `json:"agent"`
		} `json:"hosts"`
	}
	sum := connCounters{Paths: map[string]uint64{}, Reasons: map[string]uint64{}}
	if err := json.Unmarshal(out, &st); err != nil {
		return sum, fmt.Errorf("parse `freeflow status -o json` output: %w", err)
	}
	for _, h := range st.Hosts {
		if h.Agent == nil {
			return sum, fmt.Errorf("agent of %s did not answer `freeflow status`", h.Name)
		}
		for k, raw := range h.Agent.Connections {
			var n uint64
			switch {
			case k == "fallback_reasons":
				var r map[string]uint64
				if err := json.Unmarshal(raw, &r); err != nil {
					return sum, fmt.Errorf("parse %s's fallback reasons: %w", h.Name, err)
				}
				for why, v := range r {
					sum.Reasons[why] += v
				}
			case json.Unmarshal(raw, &n) != nil:
				// not a counter
			case k == "fallback":
				sum.Fallback += n
			case !notPath(k):
				sum.Paths[strings.ReplaceAll(k, "_", "-")] += n
			}
		}
	}
	return sum, nil
}

// gained is what the counters gained from a to b.
func gained(a, b connCounters) connCounters {
	d := connCounters{Paths: map[string]uint64{}, Fallback: b.Fallback - a.Fallback, Reasons: map[string]uint64{}}
	for k, n := range b.Paths {
		if n != a.Paths[k] {
			d.Paths[k] = n - a.Paths[k]
		}
	}
	for k, n := range b.Reasons {
		if n != a.Reasons[k] {
			d.Reasons[k] = n - a.Reasons[k]
		}
	}
	return d
}

// fast is how many ends took a fast path, whichever.
func (c connCounters) fast() uint64 {
	var n uint64
	for _, v := range c.Paths {
		n += v
	}
	return n
}

// reasonList writes reasons as "peer-timeout ×12, no-fast-path ×1".
func reasonList(reasons map[string]uint64) string {
	var parts []string
	for _, k := range sortedKeys(reasons) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, reasons[k]))
	}
	return strings.Join(parts, ", ")
}

func readCounters(ctx context.Context, cli CLI) (connCounters, error) {
	out, err := cli.run(ctx, "status", "-o", "json")
	if err != nil {
		return connCounters{}, err
	}
	return ParseStatusCounters(out)
}

// counterVerdict says what the counters gained between a and b: "" when
// connections took path want and none fell back, except those between
// the containers and a launcher outside them (reason launcher).
func counterVerdict(a, b connCounters, want, launcher string) string {
	var why []string
	n := b.Fallback - a.Fallback
	for _, k := range sortedKeys(b.Reasons) {
		d := b.Reasons[k] - a.Reasons[k]
		switch {
		case d == 0:
		case k == launcher:
			n -= d
		default:
			why = append(why, fmt.Sprintf("%s ×%d", k, d))
		}
	}
	if n > 0 {
		return fmt.Sprintf("%d connection ends fell back to the overlay (%s), expected %s", n, strings.Join(why, ", "), want)
	}
	if b.Paths[want] == a.Paths[want] {
		var got []string
		for _, k := range sortedKeys(b.Paths) {
			got = append(got, fmt.Sprintf("%s +%d", k, b.Paths[k]-a.Paths[k]))
		}
		return fmt.Sprintf("the agents counted no %s connection during the run (%s)", want, strings.Join(got, ", "))
	}
	return ""
}

// noLibVerdict says what the counters gained while a client without the
// library ran against a FreeFlow server: "" when the agents answered
// connection ends (the server's: the client asks nothing) and put none on
// a fast path. How they answered (the overlay reasons) is the row's
// figure, not a doubt about it.
func noLibVerdict(d connCounters) string {
	if n := d.fast(); n > 0 {
		return fmt.Sprintf("%d connection ends took a fast path (%s), but the client has no library", n, reasonList(d.Paths))
	}
	if d.Fallback == 0 {
		return "the agents counted no connection end during the run: no FreeFlow server was measured"
	}
	return ""
}
