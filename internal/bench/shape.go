package bench

import (
	"context"
	"fmt"
	"strings"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/state"
)

// fabricShaper caps the fabric with a tbf qdisc on each host's fabric
// interface (egress), inside the cluster's host namespaces only, the way
// FreeFlow's figure 3 caps the physical network.
type fabricShaper struct {
	devs map[string]string // host namespace path -> its fabric interface
}

// newFabricShaper finds each host's fabric interface: the one holding the
// host's fabric address.
func newFabricShaper(ctx context.Context, c *state.Cluster) (*fabricShaper, error) {
	f := &fabricShaper{devs: map[string]string{}}
	for _, h := range c.Hosts {
		ns := netns.Path(state.NewLayout(c.Name).HostNetNS(h.Name))
		out, err := runCmd(ctx, netns.Command(ns, "ip", "-o", "-4", "addr", "show"))
		if err != nil {
			return nil, fmt.Errorf("find the fabric interface of %s: %w", h.Name, err)
		}
		dev := fabricDev(string(out), h.FabricIP)
		if dev == "" {
			return nil, fmt.Errorf("host %s has no interface with its fabric address %s", h.Name, h.FabricIP)
		}
		f.devs[ns] = dev
	}
	return f, nil
}

// fabricDev picks the interface holding ip from `ip -o -4 addr show`.
func fabricDev(out, ip string) string {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) >= 4 && f[2] == "inet" && strings.HasPrefix(f[3], ip+"/") {
			return strings.TrimSuffix(f[1], ":")
		}
	}
	return ""
}

// tbfArgs is the qdisc for a cap: the bucket holds 10 ms at the rate (at
// least 64 KiB, one GSO packet), so the cap, not the bucket, limits TCP.
func tbfArgs(dev string, gbit float64) []string {
	burst := max(64<<10, int(gbit*1e9/8/100))
	return []string{"tc", "qdisc", "replace", "dev", dev, "root", "tbf",
		"rate", fmt.Sprintf("%dmbit", int(gbit*1000)), "burst", fmt.Sprint(burst), "latency", "20ms"}
}

// Set caps every host's fabric egress at gbit Gbit/s.
func (f *fabricShaper) Set(ctx context.Context, gbit float64) error {
	for ns, dev := range f.devs {
		argv := tbfArgs(dev, gbit)
		if _, err := runCmd(ctx, netns.Command(ns, argv[0], argv[1:]...)); err != nil {
			return fmt.Errorf("cap the fabric: %w", err)
		}
	}
	return nil
}

// Clear removes the caps; an interface without one is fine.
func (f *fabricShaper) Clear(ctx context.Context) error {
	var errs []string
	for ns, dev := range f.devs {
		out, err := runCmd(ctx, netns.Command(ns, "tc", "qdisc", "show", "dev", dev, "root"))
		if err != nil || !strings.Contains(string(out), "tbf") {
			continue
		}
		if _, err := runCmd(ctx, netns.Command(ns, "tc", "qdisc", "del", "dev", dev, "root")); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("remove the fabric cap: %s", strings.Join(errs, "; "))
	}
	return nil
}
