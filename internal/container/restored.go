package container

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/overlay"
	"github.com/freeflow-net/freeflow/internal/state"
	"golang.org/x/sys/unix"
)

// A migrated container's processes were restored by CRIU, so crun does not
// know them: its init is found by pid and start time, entered with nsenter
// and stopped with a signal.

// restoredAlive reports whether c's init still runs (not a reused pid).
func restoredAlive(c *state.Container) bool {
	return c.PID > 0 && c.Started != 0 && startTime(c.PID) == c.Started
}

func restoredStatus(c *state.Container) string {
	if restoredAlive(c) {
		return StatusRunning
	}
	return StatusExited
}

// execNamespaces are the namespaces exec enters, as nsenter names them.
var execNamespaces = []struct{ proc, flag string }{
	{"mnt", "--mount"}, {"uts", "--uts"}, {"ipc", "--ipc"}, {"net", "--net"}, {"pid", "--pid"},
}

// namespacesOf records the namespaces of pid that exec will enter.
func namespacesOf(pid int) map[string]uint64 {
	ns := map[string]uint64{}
	for _, n := range execNamespaces {
		if ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/%s", pid, n.proc)); err == nil {
			ns[n.proc] = ino
		}
	}
	return ns
}

// restoredExec runs argv in c's namespaces as restored, with the
// container's capabilities, open-file limit and no supplementary groups,
// env its whole environment (as crun exec). The namespaces are opened and
// checked first, and entered by those descriptors: an init that made new
// ones (a user namespace is no privilege) could put its own setpriv where
// this one, still holding the CLI's privileges, looks for it. The root
// and working directory are the mount namespace's, never the init's. The
// caller closes the returned files once the command ended.
func restoredExec(c *state.Container, env, argv []string) (*exec.Cmd, []*os.File, error) {
	var files []*os.File
	fail := func(err error) (*exec.Cmd, []*os.File, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, nil, fmt.Errorf("exec in %s: %w", c.Name, err)
	}
	args := []string{}
	for i, n := range execNamespaces {
		f, err := os.Open(fmt.Sprintf("/proc/%d/ns/%s", c.PID, n.proc))
		if err != nil {
			return fail(err)
		}
		files = append(files, f)
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return fail(err)
		}
		if want, ok := c.Namespaces[n.proc]; !ok || st.Ino != want {
			return fail(fmt.Errorf("its init left the %s namespace it was restored in; entering the one it chose is refused", n.proc))
		}
		args = append(args, fmt.Sprintf("%s=/proc/self/fd/%d", n.flag, 3+i))
	}
	if !restoredAlive(c) { // the pid was reused after the namespaces were opened
		return fail(fmt.Errorf("container %s is not running", c.Name))
	}
	caps := make([]string, len(containerCaps))
	for i, cp := range containerCaps {
		caps[i] = "+" + strings.ToLower(strings.TrimPrefix(cp, "CAP_"))
	}
	nf := strconv.FormatUint(nofile(), 10)
	args = append(args, "--",
		"/usr/bin/prlimit", "--nofile="+nf+":"+nf, "--",
		"/usr/bin/setpriv", "--clear-groups", "--inh-caps", "-all", "--bounding-set", "-all,"+strings.Join(caps, ","),
		"--", "/usr/bin/env", "-i")
	cmd := exec.Command("nsenter", append(append(args, env...), argv...)...)
	cmd.ExtraFiles = files
	return cmd, files, nil
}

// stopRestored kills c's init, the last process of its pid namespace to
// go, and waits for it.
func stopRestored(c *state.Container) error {
	if !restoredAlive(c) {
		return nil
	}
	if err := unix.Kill(c.PID, unix.SIGKILL); err != nil && !errors.Is(err, unix.ESRCH) {
		return fmt.Errorf("stop container %s (pid %d): %w", c.Name, c.PID, err)
	}
	for deadline := time.Now().Add(5 * time.Second); restoredAlive(c); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("container %s (pid %d) survived SIGKILL for 5 s", c.Name, c.PID)
		}
	}
	return nil
}

// withAgent runs do with a session on host's admin socket, the whole
// bounded by 10 s.
func (m *Manager) withAgent(ctx context.Context, host string, do func(context.Context, *agentapi.AdminClient) error) error {
	return m.withAgentFor(ctx, host, 10*time.Second, do)
}

// withAgentFor is withAgent bounded by d.
func (m *Manager) withAgentFor(ctx context.Context, host string, d time.Duration, do func(context.Context, *agentapi.AdminClient) error) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	agent, err := agentapi.DialAdmin(m.Layout.AdminSocket(host))
	if err != nil {
		return fmt.Errorf("reach %s's agent: %w", host, err)
	}
	defer agent.Close()
	return do(ctx, agent)
}

// unregisterAt takes c's record out of the directory through host's agent
// (the host it runs on, away from home, or the one it moved from).
func (m *Manager) unregisterAt(ctx context.Context, c *state.Container, host string) error {
	return m.withAgent(ctx, host, func(ctx context.Context, agent *agentapi.AdminClient) error {
		if err := agent.Unregister(ctx, c.ID); err != nil {
			return fmt.Errorf("unregister %s from %s's agent: %w", c.Name, host, err)
		}
		return nil
	})
}

// forgetMoves removes what migrations may have left for c on every host
// but home (whose source checks CNI DEL removes): source checks and the
// routes of its address. Idempotent; for a container that moved, or whose
// move was cut off half-way (its migration namespace is still there), so
// removing one that never moved costs nothing.
func (m *Manager) forgetMoves(c *state.Container, home string) error {
	if c.Home == "" && !netns.Exists(m.Layout.MigrationNetNS(c.Name)) {
		return nil
	}
	cl, err := m.Layout.LoadCluster()
	if err != nil || c.IP == "" {
		return nil // no cluster (down) or no address: nothing was placed
	}
	h, err := cl.Host(home)
	if err != nil {
		return err
	}
	var errs []error
	for _, o := range cl.Hosts {
		if o.Name == home || !netns.Exists(m.Layout.HostNetNS(o.Name)) {
			continue
		}
		if err := dropGuard(m.Layout, o.Name, c.ID); err != nil {
			errs = append(errs, err)
		}
	}
	if err := overlay.UnplaceAddress(m.Layout, cl.Hosts, c.IP, *h); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// clearMigration removes what a migration of container name that never
// finished left: the processes of a restored copy in the migration's
// namespace (they hold its address and MAC on a bridge), the namespace and
// the images.
func clearMigration(l state.Layout, name string) error {
	ns := l.MigrationNetNS(name)
	var errs []error
	if netns.Exists(ns) {
		if left := netns.Signal([]string{netns.Path(ns)}, unix.SIGKILL, 5*time.Second); len(left) > 0 {
			errs = append(errs, fmt.Errorf("processes %v in %s survived SIGKILL for 5 s", left, ns))
		}
		if err := netns.Delete(ns); err != nil {
			errs = append(errs, err)
		}
	}
	if err := dropImages(l.MigrationDir(name)); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// dropGuard removes container id's source checks on host.
func dropGuard(l state.Layout, host, id string) error {
	return netns.Do(netns.Path(l.HostNetNS(host)), func() error { return cni.NFTables{}.Remove(id) })
}
