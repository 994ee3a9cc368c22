package container

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/cni"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/mountinfo"
	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/overlay"
	"github.com/freeflow-net/freeflow/internal/packethold"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Migration (docs/ARCHITECTURE.md, "Control flow: migrating a container"):
// CRIU checkpoints the container's processes with their TCP connections
// into a tmpfs, the destination host gets a network namespace with the
// same address and MAC, the overlay routes the address there, and CRIU
// restores the processes into it. The container's network namespace,
// its bind mounts and its log are outside the images (CRIU's "external"
// resources): they are the host's, and the destination's own are given at
// restore.

// MigrateReport says what a migration did, or for a dry run what it would do.
type MigrateReport struct {
	Name   string `json:"name"`
	From   string `json:"from"`
	To     string `json:"to"`
	DryRun bool   `json:"dry_run"`
	Images int64  `json:"images_bytes"` // CRIU's images
	// A library container's shm connections parked on plain TCP before
	// the move (a dry run: those it has now), and how long that took (the
	// container ran on meanwhile).
	Parked int           `json:"parked"`
	Park   time.Duration `json:"park_ns"`
	// Durations in nanoseconds, the parts of Down in order: the address
	// routed to the destination (from then on the peers' packets wait
	// there); CRIU's freeze and dump; CRIU's restore and the read-only
	// binds made so again, the processes still stopped; the held packets
	// let in and the processes resumed. Down runs from the switch to the
	// processes running again.
	Switch  time.Duration `json:"switch_ns"`
	Dump    time.Duration `json:"dump_ns"`
	Restore time.Duration `json:"restore_ns"`
	Resume  time.Duration `json:"resume_ns"`
	Down    time.Duration `json:"down_ns"`
}

// criuMinMajor: bookworm's CRIU 3.17 cannot dump on this kernel.
const criuMinMajor = 4

// Migrate moves the running, detached container name to host to, keeping
// its IP, MAC, name, tenant, files and TCP connections. A migration that
// cannot be done is refused before anything changes; one that fails
// half-way puts the container back where it was.
func (m *Manager) Migrate(ctx context.Context, name, to string, dryRun bool) (*MigrateReport, error) {
	unlock, err := m.lock()
	if err != nil {
		return nil, err
	}
	defer unlock()
	cl, err := m.Layout.LoadCluster()
	if err != nil {
		return nil, err
	}
	c, err := m.Layout.LoadContainer(name)
	if err != nil {
		return nil, err
	}
	mv, err := m.planMigration(ctx, cl, c, to)
	if err != nil {
		return nil, fmt.Errorf("cannot migrate %s to %s: %w; it is left as it was, on %s", name, to, err, c.Host)
	}
	rep := &MigrateReport{Name: name, From: c.Host, To: to, DryRun: dryRun}
	if dryRun {
		rep.Parked = mv.shm
		return rep, nil
	}
	// Stopped half-way, a move would leave the container stopped or in two
	// places: it runs to its end, or to its rollback.
	// Caught, not ignored: an ignored signal stays ignored in CRIU and
	// the processes it restores.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(sigs)
	return rep, mv.run(ctx, rep)
}

// move is one migration under way.
type move struct {
	m        *Manager
	cl       *state.Cluster
	c        *state.Container
	from, to state.Host
	home     state.Host
	criu     string
	mac      string
	images   string
	mounts   []extMount
	logKeys  []string         // CRIU keys of the container's descriptors of its log
	hold     *packethold.Hold // the destination's input, held from the switch to the restore
	// restoredNS: the namespaces of the last restore's init, before it ran.
	restoredNS map[string]uint64
	shm        int // the library's shm connections when the move was planned
}

// extMount is a mount of a host path in the container: CRIU leaves it out
// of the images and binds the host's path again at restore.
type extMount struct {
	mountinfo.Entry        // as the container has it before the move
	hostPath        string // the host path it shows
}

// source is the host path the mount shows on host h: the agent's socket
// directory is each host's own.
func (x extMount) source(l state.Layout, h state.Host) string {
	if x.Point == state.ContainerAgentDir {
		return l.AgentSockDir(h.Name)
	}
	return x.hostPath
}

func (m *Manager) planMigration(ctx context.Context, cl *state.Cluster, c *state.Container, to string) (*move, error) {
	dst, err := cl.Host(to)
	if err != nil {
		return nil, err
	}
	if to == c.Host {
		return nil, fmt.Errorf("it already runs on %s", to)
	}
	src, err := cl.Host(c.Host)
	if err != nil {
		return nil, err
	}
	home := src
	if c.Home != "" {
		if home, err = cl.Host(c.Home); err != nil {
			return nil, err
		}
	}
	if st := m.status(c); st != StatusRunning {
		return nil, fmt.Errorf("it is %s, not running", st)
	}
	if !c.Detached {
		return nil, errors.New("it runs in the foreground, its input and output tied to the terminal that started it; only containers started with -d can migrate")
	}
	shm := 0
	if c.FreeFlow {
		if shm, err = m.libraryInUse(ctx, c, *src); err != nil {
			return nil, err
		}
	}
	criu, err := findCRIU()
	if err != nil {
		return nil, err
	}
	mac, err := containerMAC(m.Layout.ContainerNetNS(c.Name))
	if err != nil {
		return nil, err
	}
	mounts, err := m.externalMounts(c)
	if err != nil {
		return nil, err
	}
	logKeys, err := m.logKeys(c)
	if err != nil {
		return nil, err
	}
	return &move{m: m, cl: cl, c: c, from: *src, to: *dst, home: *home, criu: criu, mac: mac,
		images: m.Layout.MigrationDir(c.Name), mounts: mounts, logKeys: logKeys, shm: shm}, nil
}

// findCRIU returns the criu on PATH if it is new enough.
func findCRIU() (string, error) {
	path, err := exec.LookPath("criu")
	if err != nil {
		return "", errors.New("CRIU is not installed; scripts/install-deps.sh builds it")
	}
	out, err := exec.Command(path, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("%s --version: %w", path, err)
	}
	v := strings.TrimSpace(strings.TrimPrefix(strings.SplitN(string(out), "\n", 2)[0], "Version:"))
	major, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil || major < criuMinMajor {
		return "", fmt.Errorf("%s is CRIU %q, which cannot checkpoint on this kernel; scripts/install-deps.sh builds CRIU 4.2.1 into /usr/local/sbin", path, v)
	}
	return path, nil
}

// containerMAC is the MAC of the container interface in network namespace
// ns: kept, so the source checks and the peers' neighbour entries stay
// right. Asked over netlink, which follows the thread's namespace (sysfs
// shows the namespace it was mounted in).
func containerMAC(ns string) (string, error) {
	var mac string
	err := netns.Do(netns.Path(ns), func() error {
		i, err := net.InterfaceByName(cni.ContainerIfName)
		if err == nil {
			mac = i.HardwareAddr.String()
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("read the MAC of %s in %s: %w", cni.ContainerIfName, ns, err)
	}
	return mac, nil
}

// externalMounts lists the container's mounts of host file systems other
// than its root: their device is mounted in this (the host's) mount
// namespace too. Mounts of the container's own (proc, tmpfs, devpts...)
// go into the images.
func (m *Manager) externalMounts(c *state.Container) ([]extMount, error) {
	host, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	hostRoot := map[string]string{} // device -> where its root is mounted here
	for _, e := range host {
		if _, ok := hostRoot[e.Dev]; !ok && e.Root == "/" {
			hostRoot[e.Dev] = e.Point
		}
	}
	mine, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", c.PID))
	if err != nil {
		return nil, err
	}
	var out []extMount
	for _, e := range mine {
		at, ok := hostRoot[e.Dev]
		if e.Point == "/" || !ok {
			continue
		}
		// The kernel names a bind whose file was unlinked so (mountinfo escapes no slash).
		if gone, ok := strings.CutSuffix(e.Root, "//deleted"); ok {
			return nil, fmt.Errorf("its %s is bound from %s, which was replaced or deleted since it started (an upgrade of FreeFlow's "+
				"library replaces bin/libfreeflow.so, for one), and CRIU cannot restore a bind of a deleted file; "+
				"restart the container to move it", e.Point, filepath.Join(at, gone))
		}
		out = append(out, extMount{Entry: e, hostPath: filepath.Join(at, e.Root)})
	}
	return out, nil
}

// logKeys returns CRIU's keys (file[mnt_id:inode]) of the descriptors the
// container's processes hold on its log, a host file outside the
// container's mounts: CRIU leaves them out and the restore is given the
// log again.
func (m *Manager) logKeys(c *state.Container) ([]string, error) {
	var st unix.Stat_t
	if err := unix.Stat(m.LogFile(c.Name), &st); err != nil {
		return nil, fmt.Errorf("stat the log of %s: %w", c.Name, err)
	}
	seen := map[string]bool{}
	var keys []string
	for _, pid := range pidsInNamespace(c.PID) {
		fds, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		for _, fd := range fds {
			var fst unix.Stat_t
			if unix.Stat(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()), &fst) != nil || fst.Ino != st.Ino || fst.Dev != st.Dev {
				continue
			}
			info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, fd.Name()))
			if err != nil {
				continue
			}
			for _, l := range strings.Split(string(info), "\n") {
				if v, ok := strings.CutPrefix(l, "mnt_id:"); ok {
					id, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					if err != nil {
						continue
					}
					k := fmt.Sprintf("file[%x:%x]", id, st.Ino)
					if !seen[k] {
						seen[k] = true
						keys = append(keys, k)
					}
				}
			}
		}
	}
	return keys, nil
}

// pidsInNamespace lists the processes in init's pid namespace, init too.
func pidsInNamespace(init int) []int {
	return netns.Pids("pid", fmt.Sprintf("/proc/%d/ns/pid", init))
}

func (mv *move) run(ctx context.Context, rep *MigrateReport) (err error) {
	l := mv.m.Layout
	c := mv.c
	newNS := l.MigrationNetNS(c.Name)
	if err := mv.prepare(newNS); err != nil {
		return mv.abandon(newNS, fmt.Errorf("prepare %s: %w", mv.to.Name, err))
	}
	moved := false  // past the point of no return: the source's agent no longer has it
	if c.FreeFlow { // no session of its library left for CRIU to find (migrate_lib.go)
		defer func() {
			if err != nil && !moved { // back on the source: its agent serves it again
				if e := mv.releaseSessions(ctx, time.Time{}); e != nil {
					err = fmt.Errorf("%w\nletting %s's agent serve it again failed too (it does after %v): %v", err, mv.from.Name, releaseHold, e)
				}
			}
		}()
		t := time.Now()
		n, err := mv.parkShm(ctx)
		rep.Parked, rep.Park = n, time.Since(t)
		if err != nil {
			return mv.abandon(newNS, fmt.Errorf("park %s's shm connections on TCP: %w\nit runs on %s as before (those parked before the failure stay on plain TCP)", c.Name, err, mv.from.Name))
		}
		if err := mv.releaseSessions(ctx, time.Now().Add(releaseHold)); err != nil {
			return mv.abandon(newNS, fmt.Errorf("close %s's agent sessions: %w\nit runs on %s as before", c.Name, err, mv.from.Name))
		}
		if err := mv.awaitOwnSockets(ctx); err != nil {
			return mv.abandon(newNS, fmt.Errorf("%w\nit runs on %s as before", err, mv.from.Name))
		}
	}
	if err := mv.awaitAccepted(ctx); err != nil {
		return mv.abandon(newNS, fmt.Errorf("%w\nit runs on %s as before", err, mv.from.Name))
	}
	// The peers' packets go to the destination, where they wait, from
	// just before the freeze: none is lost, so a peer's request during the
	// move costs it the move, not a retransmission timeout.
	start := time.Now()
	lap := func(d *time.Duration) { *d = time.Since(start) - rep.Switch - rep.Dump - rep.Restore }
	if err := mv.switchTo(mv.to); err != nil {
		return mv.switchBack(newNS, err)
	}
	lap(&rep.Switch)
	if err := mv.dump(); err != nil {
		return mv.switchBack(newNS, err) // CRIU lets the processes run on after a failed dump
	}
	lap(&rep.Dump)
	rep.Images = dirSize(mv.images)
	pid, err := mv.restore(newNS, mv.to)
	if err != nil {
		return mv.rollBack(newNS, err)
	}
	lap(&rep.Restore)
	if _, err := mv.hold.Release(); err != nil { // a failed verdict let nothing in: the source's copy is still right
		mv.discard(newNS, pid)
		return mv.rollBack(newNS, err)
	}
	// From here the destination's sockets have taken the peers' bytes: it
	// is the only copy, whatever fails.
	moved = true
	errResume := resume(pid)
	lap(&rep.Resume)
	rep.Down = time.Since(start)
	errHold := mv.hold.Close() // what arrived or left since the release
	return errors.Join(mv.finish(ctx, newNS, pid), errResume, errHold)
}

// switchTo routes the container's address to host h and brings up the
// container interface there. The namespace on the other host must not
// answer ARP for the address on its bridge meanwhile: moving on, the
// source keeps its link up, so what the container sends until the freeze
// (a request, an ACK) still reaches its peers, whose answers wait at the
// destination, and only its ARP is dropped (taken down, a request sent in
// between was lost: 1.1-1.9 s of retransmission timeout after the
// restore); back at the source, the destination's namespace, where
// nothing runs, goes down, and the source is as it was (up again: a
// discarded copy there took it down). The home host's containers forget
// their neighbour entry for the address.
func (mv *move) switchTo(h state.Host) error {
	l := mv.m.Layout
	src, dst := l.ContainerNetNS(mv.c.Name), l.MigrationNetNS(mv.c.Name)
	back := h.Name == mv.from.Name
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	if back {
		keep(mv.setLink(dst, mv.to, false))
	} else {
		keep(mv.muteARP(src, mv.from, true))
	}
	if err := overlay.PlaceAddress(l, mv.cl.Hosts, mv.c.IP, mv.home, h); err != nil {
		keep(fmt.Errorf("route %s to %s: %w", mv.c.IP, h.Name, err))
	}
	if back {
		keep(mv.setLink(src, mv.from, true))
		keep(mv.muteARP(src, mv.from, false))
	} else {
		keep(mv.setLink(dst, mv.to, true))
	}
	mv.m.forgetNeighbour(mv.c.IP, mv.home.Name)
	return errors.Join(errs...)
}

// switchBack undoes switchTo after a failed dump (the processes run on
// where they were): the held packets are dropped, for the peers to send
// again to the source.
func (mv *move) switchBack(newNS string, why error) error {
	if err := mv.switchTo(mv.from); err != nil {
		why = fmt.Errorf("%w\nrouting %s back to %s failed too: %v", why, mv.c.IP, mv.from.Name, err)
	}
	if startTime(mv.c.PID) == 0 { // CRIU itself died mid-dump
		why = fmt.Errorf("%w\nthe container's processes are gone (`freeflow rm -f %s` removes what is left)", why, mv.c.Name)
	} else {
		why = fmt.Errorf("%w\nit runs on %s as before", why, mv.from.Name)
	}
	return mv.abandon(newNS, why)
}

// prepare makes the destination's namespace, attached and guarded, and the
// tmpfs for the images.
func (mv *move) prepare(newNS string) error {
	// What a CLI that died mid-move left (rm -f clears it too).
	if err := clearMigration(mv.m.Layout, mv.c.Name); err != nil {
		return err
	}
	if err := netns.Create(newNS); err != nil {
		return err
	}
	if err := overlay.AttachMoved(mv.m.Layout, mv.to, newNS, mv.hostVeth(), mv.c.IP, mv.mac); err != nil {
		return err
	}
	// Down until the switch: it would answer ARP for the address while the
	// container still runs where it is.
	if err := mv.setLink(newNS, mv.to, false); err != nil {
		return err
	}
	if err := mv.guard(mv.to); err != nil {
		return err
	}
	if err := os.MkdirAll(mv.images, 0o700); err != nil {
		return fmt.Errorf("create %s: %w", mv.images, err)
	}
	if err := unix.Mount("tmpfs", mv.images, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700"); err != nil {
		return fmt.Errorf("mount a tmpfs for the images on %s: %w", mv.images, err)
	}
	var err error
	mv.hold, err = packethold.Start(newNS, cni.ContainerIfName)
	return err
}

// setLink sets the host end of the container interface of namespace ns
// (on host h) up or down. Not the container end: taking a link down
// flushes the routes through it, and a restore needs them.
func (mv *move) setLink(ns string, h state.Host, up bool) error {
	err := mv.onHostEnd(ns, h, func(l netlink.Link) error {
		if up {
			return netlink.LinkSetUp(l)
		}
		return netlink.LinkSetDown(l)
	})
	if err != nil {
		return fmt.Errorf("set the host end of %s's %s on %s up=%v: %w", ns, cni.ContainerIfName, h.Name, up, err)
	}
	return nil
}

// muteARP puts the container's source checks on the host end of its
// interface in namespace ns on host h again, dropping its ARP if mute.
func (mv *move) muteARP(ns string, h state.Host, mute bool) error {
	err := mv.onHostEnd(ns, h, func(l netlink.Link) error {
		return cni.NFTables{}.Install(mv.c.ID, cni.Port{HostSide: []string{l.Attrs().Name}, MAC: mv.mac,
			IP: net.ParseIP(mv.c.IP).To4(), MuteARP: mute})
	})
	if err != nil {
		return fmt.Errorf("source checks on the host end of %s's %s on %s, ARP muted=%v: %w", ns, cni.ContainerIfName, h.Name, mute, err)
	}
	return nil
}

// onHostEnd runs do, in host h's network namespace, on the host end of the
// container interface of namespace ns.
func (mv *move) onHostEnd(ns string, h state.Host, do func(netlink.Link) error) error {
	var peer int
	err := netns.Do(netns.Path(ns), func() error {
		l, err := netlink.LinkByName(cni.ContainerIfName)
		if err == nil {
			peer = l.Attrs().ParentIndex
		}
		return err
	})
	if err != nil {
		return err
	}
	return netns.Do(netns.Path(mv.m.Layout.HostNetNS(h.Name)), func() error {
		l, err := netlink.LinkByIndex(peer)
		if err != nil {
			return err
		}
		return do(l)
	})
}

// hostVeth names the destination's end of the container's interface.
func (mv *move) hostVeth() string {
	sum := sha256.Sum256([]byte(mv.c.ID))
	return "vm" + hex.EncodeToString(sum[:4])
}

// guard installs the container's source checks on its veth on host h.
func (mv *move) guard(h state.Host) error {
	ip, mac := mv.c.IP, mv.mac
	return netns.Do(netns.Path(mv.m.Layout.HostNetNS(h.Name)), func() error {
		return cni.NFTables{}.Install(mv.c.ID, cni.Port{HostSide: []string{mv.hostVeth()}, MAC: mac, IP: net.ParseIP(ip).To4()})
	})
}

func (mv *move) dump() error {
	ino, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", mv.c.PID))
	if err != nil {
		return err
	}
	args := []string{"dump", "-t", strconv.Itoa(mv.c.PID), "-D", mv.images, "-o", "dump.log",
		"--tcp-established", "--manage-cgroups=ignore", "--external", fmt.Sprintf("net[%d]:net", ino)}
	for i, x := range mv.mounts {
		args = append(args, "--external", fmt.Sprintf("mnt[%s]:m%d", x.Point, i))
	}
	for _, k := range mv.logKeys {
		args = append(args, "--external", k)
	}
	cmd := exec.Command(mv.criu, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if out, err := cmd.CombinedOutput(); err != nil {
		tail := mv.logTail("dump.log")
		if strings.Contains(tail, "In-flight connection") {
			tail += "\n(a connection reached a listen queue of the container between the wait for its program to accept and the switch: try again)"
		}
		return fmt.Errorf("checkpoint (criu dump): %w: %s%s", err, strings.TrimSpace(string(out)), tail)
	}
	return nil
}

// restore runs the images in namespace ns on host h and returns the
// restored init's pid.
func (mv *move) restore(ns string, h state.Host) (int, error) {
	pidFile := filepath.Join(mv.images, "pid")
	if err := os.Remove(pidFile); err != nil && !errors.Is(err, os.ErrNotExist) { // CRIU will not write over one (a restore before this one)
		return 0, err
	}
	nsf, err := os.Open(netns.Path(ns))
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", ns, err)
	}
	defer nsf.Close()
	files := []*os.File{nsf}
	args := []string{"restore", "-D", mv.images, "-o", "restore.log", "--tcp-established", "--manage-cgroups=ignore",
		"--restore-detached", "--leave-stopped", "--pidfile", pidFile,
		"--root", filepath.Join(mv.m.Layout.ContainerDir(mv.c.Name), "rootfs"), "--inherit-fd", "fd[3]:net"}
	for _, k := range mv.logKeys {
		log, err := os.OpenFile(mv.m.LogFile(mv.c.Name), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			return 0, fmt.Errorf("open the log of %s: %w", mv.c.Name, err)
		}
		defer log.Close()
		files = append(files, log)
		args = append(args, "--inherit-fd", fmt.Sprintf("fd[%d]:%s", 2+len(files), k))
	}
	for i, x := range mv.mounts {
		args = append(args, "--external", fmt.Sprintf("mnt[m%d]:%s", i, x.source(mv.m.Layout, h)))
	}
	cmd := inMountNS(filepath.Join(mv.m.Layout.ContainerDir(mv.c.Name), "rootfs"), append([]string{mv.criu}, args...)...)
	cmd.ExtraFiles = files
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C at the terminal is the CLI's to handle
	if out, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("restore (criu restore) on %s: %w: %s%s", h.Name, err, strings.TrimSpace(string(out)), mv.logTail("restore.log"))
	}
	pid, err := readPID(pidFile)
	if err != nil {
		return 0, err
	}
	mv.restoredNS = namespacesOf(pid) // before the processes run: what they make later is theirs
	if err := mv.readOnlyAgain(pid, h); err != nil {
		mv.discard(ns, pid)
		return 0, err
	}
	return pid, nil
}

// readOnlyAgain: CRIU binds the host paths again but leaves read-only
// binds of files writable (/etc/hosts is the whole cluster's). The
// processes are still stopped (--leave-stopped), so none can open one for
// writing meanwhile. The mounts are then checked against what they were:
// one a process redirected (a symlink in a directory it can write) would
// show writable.
func (mv *move) readOnlyAgain(pid int, h state.Host) error {
	for _, x := range mv.mounts {
		if !x.ReadOnly() {
			continue
		}
		opts := "remount,bind," + strings.Join(x.Options, ",") // all of them: a remount clears the flags it is not given
		if out, err := exec.Command("nsenter", "-t", strconv.Itoa(pid), "-m", "--", "mount", "-o", opts, x.Point).CombinedOutput(); err != nil {
			return fmt.Errorf("make %s read-only again in the restored container: %w: %s", x.Point, err, strings.TrimSpace(string(out)))
		}
	}
	now, err := mountinfo.Read(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return err
	}
	host, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	for _, x := range mv.mounts {
		if !x.ReadOnly() {
			continue
		}
		dev, root, err := hostFile(host, x.source(mv.m.Layout, h))
		if err != nil || !stillReadOnly(now, x.Point, dev, root) {
			return fmt.Errorf("%s is not read-only in the restored container", x.Point)
		}
	}
	return nil
}

// hostFile returns the device of the host file system path is on and
// path's place in it, as mountinfo names a bind of it.
func hostFile(host []mountinfo.Entry, path string) (dev, root string, err error) {
	path, err = filepath.EvalSymlinks(path)
	if err != nil {
		return "", "", err
	}
	best := -1
	for i, e := range host {
		if (path == e.Point || strings.HasPrefix(path, strings.TrimSuffix(e.Point, "/")+"/")) &&
			(best < 0 || len(e.Point) >= len(host[best].Point)) {
			best = i // the last of equal mount points is the one on top
		}
	}
	if best < 0 {
		return "", "", fmt.Errorf("no mount holds %s", path)
	}
	e := host[best]
	rel, err := filepath.Rel(e.Point, path)
	if err != nil {
		return "", "", err
	}
	return e.Dev, filepath.Join(e.Root, rel), nil
}

// stillReadOnly reports whether every mount at point shows root of device
// dev and is read-only.
func stillReadOnly(now []mountinfo.Entry, point, dev, root string) bool {
	found := false
	for _, e := range now {
		if e.Point != point {
			continue
		}
		if e.Dev != dev || e.Root != root || !e.ReadOnly() {
			return false
		}
		found = true
	}
	return found
}

// resume lets the restored processes run (CRIU left them stopped).
func resume(pid int) error {
	pids := pidsInNamespace(pid)
	if len(pids) == 0 {
		return fmt.Errorf("resume restored process %d: it is gone", pid)
	}
	for _, p := range pids {
		if err := unix.Kill(p, unix.SIGCONT); err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("resume restored process %d: %w", p, err)
		}
	}
	return nil
}

// discard kills a restored copy that is not kept, its interface down
// first: its sockets' last words (FIN, RST) must not reach the peers,
// whose connections live on in the copy restored elsewhere.
func (mv *move) discard(ns string, pid int) {
	at := mv.to
	if ns == mv.m.Layout.ContainerNetNS(mv.c.Name) {
		at = mv.from
	}
	_ = mv.setLink(ns, at, false)
	_ = unix.Kill(pid, unix.SIGKILL)
	for deadline := time.Now().Add(5 * time.Second); startTime(pid) != 0 && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
}

// rollBack restores the container where it was after a failed restore.
func (mv *move) rollBack(newNS string, why error) error {
	l := mv.m.Layout
	// The source's namespace holds its input too while the processes come
	// back: it has no sockets until then.
	back, err := packethold.Start(l.ContainerNetNS(mv.c.Name), cni.ContainerIfName)
	if err != nil {
		why = fmt.Errorf("%w\nholding the input on %s failed too (the peers may see resets): %v", why, mv.from.Name, err)
	}
	if err := mv.switchTo(mv.from); err != nil {
		why = fmt.Errorf("%w\nrouting %s back to %s failed too: %v", why, mv.c.IP, mv.from.Name, err)
	}
	if !mv.c.Restored { // its first process is gone: crun's state of it must not outlive it
		if err := mv.m.runtime().delete(mv.c.ID, true); err != nil && !notFound(err) {
			why = fmt.Errorf("%w\n%v", why, err)
		}
	}
	pid, err := mv.restore(l.ContainerNetNS(mv.c.Name), mv.from)
	if err == nil {
		err = resume(pid)
	}
	if back != nil {
		var herr error
		if err != nil {
			_, herr = back.Drop()
		} else {
			herr = back.Close()
		}
		if herr != nil {
			why = fmt.Errorf("%w\n%v", why, herr)
		}
	}
	if err != nil {
		return mv.abandonKeeping(newNS, fmt.Errorf("%w\nrestoring it on %s failed too, so the container is stopped; its images are in %s (`freeflow rm -f %s` removes them): %v",
			why, mv.from.Name, mv.images, mv.c.Name, err), true)
	}
	mv.c.PID, mv.c.Restored, mv.c.Started, mv.c.Namespaces = pid, true, startTime(pid), mv.restoredNS
	if err := l.SaveContainer(mv.c); err != nil {
		why = fmt.Errorf("%w\nrecording its new pid failed: %v", why, err)
	}
	return mv.abandon(newNS, fmt.Errorf("%w\nit runs on %s again", why, mv.from.Name))
}

// abandon removes what prepare made on the destination and returns why.
func (mv *move) abandon(newNS string, why error) error { return mv.abandonKeeping(newNS, why, false) }

// abandonKeeping is abandon that leaves the images when keepImages is set.
func (mv *move) abandonKeeping(newNS string, why error, keepImages bool) error {
	var errs []error
	if mv.hold != nil {
		if _, err := mv.hold.Drop(); err != nil {
			errs = append(errs, err)
		}
	}
	if err := dropGuard(mv.m.Layout, mv.to.Name, mv.c.ID); err != nil {
		errs = append(errs, err)
	}
	if err := netns.Delete(newNS); err != nil {
		errs = append(errs, err)
	}
	if !keepImages {
		if err := dropImages(mv.images); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w\ncleaning up %s failed: %v", why, mv.to.Name, errors.Join(errs...))
	}
	return why
}

// finish takes the source side down, gives the new namespace the
// container's name and moves the container's directory record.
func (mv *move) finish(ctx context.Context, newNS string, pid int) error {
	l := mv.m.Layout
	c := mv.c
	var errs []error
	if !c.Restored {
		if err := mv.m.runtime().delete(c.ID, true); err != nil && !notFound(err) {
			errs = append(errs, fmt.Errorf("delete crun's state of %s: %w", c.Name, err))
		}
	}
	if err := dropGuard(l, mv.from.Name, c.ID); err != nil {
		errs = append(errs, err)
	}
	// The veth pair goes now, not when the kernel gets round to the
	// namespace: a move straight back makes one of the same name.
	_ = exec.Command("ip", "-n", l.ContainerNetNS(c.Name), "link", "del", cni.ContainerIfName).Run()
	if err := netns.Delete(l.ContainerNetNS(c.Name)); err != nil {
		errs = append(errs, err)
	}
	if err := netns.Rename(newNS, l.ContainerNetNS(c.Name)); err != nil {
		errs = append(errs, err)
	}
	c.Host, c.Home, c.PID, c.Restored, c.Started, c.Namespaces = mv.to.Name, mv.home.Name, pid, true, startTime(pid), mv.restoredNS
	if err := l.SaveContainer(c); err != nil {
		errs = append(errs, err)
	}
	if err := mv.reregister(ctx); err != nil {
		errs = append(errs, err)
	}
	if err := dropImages(mv.images); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s runs on %s, but finishing the move failed: %w", c.Name, mv.to.Name, errors.Join(errs...))
	}
	return nil
}

// reregister moves the container's directory record from the source's
// agent to the destination's.
func (mv *move) reregister(ctx context.Context) error {
	c := mv.c
	if err := mv.m.unregisterAt(ctx, c, mv.from.Name); err != nil {
		return err
	}
	rec := directory.Container{ID: c.ID, Name: c.Name, Host: mv.to.Name, IP: c.IP, Tenant: c.Tenant,
		NetNS: netns.Path(mv.m.Layout.ContainerNetNS(c.Name)), FreeFlow: c.FreeFlow, NoShm: c.NoShm, Moved: mv.to.Name != mv.home.Name}
	return mv.m.withAgent(ctx, mv.to.Name, func(ctx context.Context, agent *agentapi.AdminClient) error {
		if err := agent.Register(ctx, rec); err != nil {
			return fmt.Errorf("register %s with %s's agent: %w", c.Name, mv.to.Name, err)
		}
		return nil
	})
}

// forgetNeighbour drops the neighbour entries containers on hosts hold
// for ip: they name the MAC of a veth that is gone from their bridge, and
// would lose frames until they go stale.
func (m *Manager) forgetNeighbour(ip string, hosts ...string) {
	cs, _ := m.Layout.Containers()
	var wg sync.WaitGroup
	for _, o := range cs {
		if o.IP == ip || !slices.Contains(hosts, o.Host) {
			continue
		}
		wg.Add(1)
		go func(ns string) { // side by side: the container is stopped meanwhile
			defer wg.Done()
			_ = exec.Command("ip", "-n", ns, "neigh", "del", ip, "dev", cni.ContainerIfName).Run()
		}(m.Layout.ContainerNetNS(o.Name))
	}
	wg.Wait()
}

func (mv *move) logTail(name string) string {
	b, err := os.ReadFile(filepath.Join(mv.images, name))
	if err != nil {
		return ""
	}
	var errs []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "Error") {
			errs = append(errs, strings.Map(printable, strings.TrimSpace(l))) // paths are the container's: no escape sequences to the terminal
		}
	}
	if len(errs) > 5 {
		errs = errs[len(errs)-5:]
	}
	if len(errs) == 0 {
		return ""
	}
	return "\n" + name + ": " + strings.Join(errs, "\n")
}

// dropImages unmounts the images' tmpfs and removes its mount point.
func dropImages(dir string) error {
	if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %s: %w", dir, err)
	}
	if err := os.Remove(dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", dir, err)
	}
	return nil
}

func dirSize(dir string) int64 {
	var n int64
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if i, err := e.Info(); err == nil {
			n += i.Size()
		}
	}
	return n
}

func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, fmt.Errorf("stat %s: %w", path, err)
	}
	return st.Ino, nil
}

// startTime is field 22 of /proc/PID/stat, 0 if the process is gone or a
// zombie.
func startTime(pid int) uint64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')') // the command may hold spaces and parentheses
	if i < 0 {
		return 0
	}
	fs := strings.Fields(s[i+1:]) // fs[0] is field 3, the state
	if len(fs) < 20 || fs[0] == "Z" || fs[0] == "X" {
		return 0
	}
	v, _ := strconv.ParseUint(fs[19], 10, 64)
	return v
}

func printable(r rune) rune {
	if r < ' ' || r == 0x7f {
		return '?'
	}
	return r
}
