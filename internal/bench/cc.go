package bench

import (
	"context"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/freeflow-net/freeflow/internal/netns"
)

const ccKey = "net.ipv4.tcp_congestion_control"

// allowedPath lists the algorithms a network namespace other than the
// machine's own may make its default (and unprivileged sockets may pick).
// The kernel refuses any other algorithm with EPERM, and cubic is not on
// the list on this machine (the default is bbr). Adding an algorithm to
// the list changes no namespace's default and no running socket.
const allowedPath = "/proc/sys/net/ipv4/tcp_allowed_congestion_control"

// ccState remembers each namespace's congestion control before the bench
// changed it, so a cluster the bench did not create is left as it was,
// and the allowed list as the machine had it.
type ccState struct {
	before  map[string]string // nsPath -> algorithm
	allowed string            // the allowed list to put back; "" = unchanged
}

// SetCC sets algo as the congestion control of every namespace in nsPaths
// (label -> path) and returns what each one uses afterwards. The setting is
// per network namespace; the machine's own namespace is never touched.
// algo "default" changes nothing and only reads.
func SetCC(ctx context.Context, nsPaths map[string]string, algo string) (map[string]string, *ccState, error) {
	st := &ccState{before: map[string]string{}}
	used, err := st.set(ctx, nsPaths, algo)
	return used, st, err
}

// set is SetCC on a state that remembers, across calls, what each
// namespace had before the first.
func (s *ccState) set(ctx context.Context, nsPaths map[string]string, algo string) (map[string]string, error) {
	used := map[string]string{}
	if algo != "default" {
		if err := s.allow(algo); err != nil {
			return nil, err
		}
	}
	for _, label := range sortedKeys(nsPaths) {
		path := nsPaths[label]
		cur, err := readCC(ctx, path)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", label, err)
		}
		if algo != "default" && cur != algo {
			if _, ok := s.before[path]; !ok {
				s.before[path] = cur
			}
			if err := writeCC(ctx, path, algo); err != nil {
				return nil, fmt.Errorf("%s: %w", label, err)
			}
			cur = algo
		}
		used[label] = cur
	}
	return used, nil
}

// ccSwitch moves the cluster's namespaces between the run's congestion
// control and the machine's default as experiments need (a new socket
// takes its namespace's default when it is created, an accepted one
// when it is accepted), and restores them at the end.
type ccSwitch struct {
	*ccState
	ns  map[string]string
	cur string // what every namespace uses now ("default": as they were)
}

func newCCSwitch(ns map[string]string) *ccSwitch {
	return &ccSwitch{ccState: &ccState{before: map[string]string{}}, ns: ns}
}

// set sets algo everywhere and returns what each namespace uses.
func (c *ccSwitch) set(ctx context.Context, algo string) (map[string]string, error) {
	used, err := c.ccState.set(ctx, c.ns, algo)
	if err == nil {
		c.cur = algo
	}
	return used, err
}

// use makes every namespace use algo, unless it already does.
func (c *ccSwitch) use(ctx context.Context, algo string) error {
	if algo == c.cur {
		return nil
	}
	if algo == "default" {
		for path, was := range c.before {
			if err := writeCC(ctx, path, was); err != nil {
				return err
			}
		}
		c.cur = algo
		return nil
	}
	_, err := c.set(ctx, algo)
	return err
}

// allow puts algo on the machine's allowed list if it is not there yet.
func (s *ccState) allow(algo string) error {
	b, err := os.ReadFile(allowedPath)
	if err != nil {
		return fmt.Errorf("read allowed congestion control algorithms: %w", err)
	}
	cur := strings.TrimSpace(string(b))
	if slices.Contains(strings.Fields(cur), algo) {
		return nil
	}
	if err := os.WriteFile(allowedPath, []byte(cur+" "+algo), 0o644); err != nil {
		return fmt.Errorf("allow congestion control %s for the cluster's namespaces (is it in net.ipv4.tcp_available_congestion_control?): %w", algo, err)
	}
	s.allowed = cur
	return nil
}

// AllowedChange says what SetCC did to the machine's allowed list, or "".
func (s *ccState) AllowedChange() string {
	if s.allowed == "" {
		return ""
	}
	return fmt.Sprintf("net.ipv4.tcp_allowed_congestion_control was %q; the algorithm was added for the run and the list restored after it", s.allowed)
}

// Restore puts back what SetCC changed. Namespace defaults go first; the
// allowed list last: taking an algorithm off it does not change a default
// already set, so a parallel run that set it keeps it.
func (s *ccState) Restore(ctx context.Context) error {
	var errs []string
	for path, algo := range s.before {
		if err := writeCC(ctx, path, algo); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if s.allowed != "" {
		if err := os.WriteFile(allowedPath, []byte(s.allowed), 0o644); err != nil {
			errs = append(errs, fmt.Sprintf("restore %s: %v", allowedPath, err))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("restore congestion control: %s", strings.Join(errs, "; "))
	}
	return nil
}

func readCC(ctx context.Context, nsPath string) (string, error) {
	out, err := runCmd(ctx, netns.Command(nsPath, "sysctl", "-n", ccKey))
	if err != nil {
		return "", fmt.Errorf("read congestion control: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

func writeCC(ctx context.Context, nsPath, algo string) error {
	if _, err := runCmd(ctx, netns.Command(nsPath, "sysctl", "-q", "-w", ccKey+"="+algo)); err != nil {
		return fmt.Errorf("set congestion control %s (is it in net.ipv4.tcp_available_congestion_control?): %w", algo, err)
	}
	return nil
}

// uniformCC returns the one algorithm every namespace uses, or "".
func uniformCC(used map[string]string) string {
	algo := ""
	for _, a := range used {
		if algo != "" && a != algo {
			return ""
		}
		algo = a
	}
	return algo
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
