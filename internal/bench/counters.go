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

// connCounters are the agents' connection counters, summed over hosts.
type connCounters struct {
	Unix     uint64            `json:"unix"`
	HostTCP  uint64            `json:"host_tcp"`
	Fallback uint64            `json:"fallback"`
	Reasons  map[string]uint64 `json:"fallback_reasons"`
}

// ParseStatusCounters sums the counters of every host in `freeflow status
// -o json`; a host whose agent did not answer is an error.
func ParseStatusCounters(out []byte) (connCounters, error) {
	var st struct {
		Hosts []struct {
			Name  string `json:"name"`
			Agent *struct {
				Connections connCounters `json:"connections"`
			} `json:"agent"`
		} `json:"hosts"`
	}
	sum := connCounters{Reasons: map[string]uint64{}}
	if err := json.Unmarshal(out, &st); err != nil {
		return sum, fmt.Errorf("parse `freeflow status -o json` output: %w", err)
	}
	for _, h := range st.Hosts {
		if h.Agent == nil {
			return sum, fmt.Errorf("agent of %s did not answer `freeflow status`", h.Name)
		}
		c := h.Agent.Connections
		sum.Unix, sum.HostTCP, sum.Fallback = sum.Unix+c.Unix, sum.HostTCP+c.HostTCP, sum.Fallback+c.Fallback
		for k, v := range c.Reasons {
			sum.Reasons[k] += v
		}
	}
	return sum, nil
}

func readCounters(ctx context.Context, cli CLI) (connCounters, error) {
	out, err := cli.run(ctx, "status", "-o", "json")
	if err != nil {
		return connCounters{}, err
	}
	return ParseStatusCounters(out)
}

// counterVerdict says what the counters gained between a and b: "" when
// connections took path want and none fell back.
func counterVerdict(a, b connCounters, want string) string {
	if n := b.Fallback - a.Fallback; n > 0 {
		var why []string
		for _, k := range sortedKeys(b.Reasons) {
			if d := b.Reasons[k] - a.Reasons[k]; d > 0 {
				why = append(why, fmt.Sprintf("%s ×%d", k, d))
			}
		}
		return fmt.Sprintf("%d connection ends fell back to the overlay (%s), expected %s", n, strings.Join(why, ", "), want)
	}
	got := map[string]uint64{"unix": b.Unix - a.Unix, "host-tcp": b.HostTCP - a.HostTCP}
	if got[want] == 0 {
		return fmt.Sprintf("the agents counted no %s connection during the run (unix +%d, host-tcp +%d)", want, got["unix"], got["host-tcp"])
	}
	return ""
}
