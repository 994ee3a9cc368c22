package agent

// Design note: finding the ledgers of a host's processes (PROTOCOL.md,
// "The ledger").
//
// A library hands its ledger to its agent once, and again only on a
// session it opens after one broke. An agent that restarted would thus
// know a process's connections only once that process talks to it again,
// and those of a process that never does, never. So when the agent comes
// to know a local container (at start, when its directory cache brings
// one it did not know, or at REGISTER), it finds the ledgers of that
// container's processes itself: every process whose network namespace is
// the container's (the same identification as a caller's, identity.go),
// and in it the descriptor whose link reads as a memfd named
// "freeflow-ledger". The agent runs as root on the host, so it may open
// that memfd through /proc/<pid>/fd/<n>, read-only; from there it is
// checked and mapped as a handed one (mapLedger), and a memfd already
// mapped (the same inode) is not mapped twice.
//
// Nothing found is trusted more than a handed ledger: the name only
// selects a candidate; the descriptor must be a regular file on the
// memfd mount (the device of a memfd the agent makes itself), checked
// before it is opened, so opening it has no side effect and cannot block
// (O_NONBLOCK besides), and again after; then its size, seals and header.
// A process lies only about itself, as with LEDGER, and at most one
// ledger is taken per process. The cost is one readlink per descriptor of
// the container's processes, once per container and agent start.

import (
	"fmt"
	"os"
	"strconv"
	"sync"

	"github.com/freeflow-net/freeflow/internal/directory"
	"golang.org/x/sys/unix"
)

// ledgerLink is what /proc/<pid>/fd/<n> reads for a library's ledger
// memfd (memfd_create("freeflow-ledger"), ledger.c).
const ledgerLink = "/memfd:freeflow-ledger (deleted)"

// scanLedgers maps the ledgers of the processes in the network namespaces
// of the containers in, found through /proc.
func (a *Agent) scanLedgers(in map[nsKey]directory.Container) {
	// The host's namespace, the agent's own, is no container's (REGISTER
	// refuses it); its processes are the host's, whatever their memfds say.
	delete(in, a.selfNS)
	if len(in) == 0 {
		return
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		a.log.Warn("list processes to find their ledgers; their connections are listed once they talk to the agent", "err", err)
		return
	}
	a.ledgers.prune()
	found := 0
	for _, p := range procs {
		pid, err := strconv.ParseInt(p.Name(), 10, 32)
		if err != nil {
			continue
		}
		k, err := nsOfPid(int32(pid))
		if err != nil { // gone, or a kernel thread
			continue
		}
		if c, ok := in[k]; ok && a.adoptLedger(int32(pid), c) {
			found++
		}
	}
	a.log.Info("found the ledgers of running processes", "containers", len(in), "ledgers", found)
}

// adoptLedger maps the ledger of process pid of container c, if it has
// one, and says whether it did.
func (a *Agent) adoptLedger(pid int32, c directory.Container) bool {
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return false
	}
	for _, fd := range fds {
		path := dir + "/" + fd.Name()
		if link, err := os.Readlink(path); err != nil || link != ledgerLink {
			continue
		}
		err := openLedger(path, func(lfd int) error { return a.ledgers.put(pid, c, lfd) })
		if err == nil {
			return true
		}
		a.log.Debug("a process's ledger candidate is no ledger", "pid", pid, "container", c.ID, "fd", path, "err", err)
	}
	return false
}

// openLedger opens the ledger candidate at path (a /proc fd link) read-only
// and calls use with it, once it is known to be a memfd.
func openLedger(path string, use func(fd int) error) error {
	dev, err := memfdDevice()
	if err != nil {
		return err
	}
	var before, after unix.Stat_t
	if err := unix.Stat(path, &before); err != nil {
		return err
	}
	if before.Mode&unix.S_IFMT != unix.S_IFREG || before.Dev != dev {
		return fmt.Errorf("not a memfd (mode %#o, device %d)", before.Mode, before.Dev)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &after); err != nil {
		return err
	}
	if after.Dev != before.Dev || after.Ino != before.Ino {
		return fmt.Errorf("the descriptor changed while it was opened")
	}
	return use(fd)
}

var memfdDev struct {
	once sync.Once
	dev  uint64
	err  error
}

// memfdDevice returns the device of memfds (not huge-page ones): the
// kernel's one internal shmem mount.
func memfdDevice() (uint64, error) {
	memfdDev.once.Do(func() {
		fd, err := unix.MemfdCreate("freeflow-probe", unix.MFD_CLOEXEC)
		if err != nil {
			memfdDev.err = fmt.Errorf("memfd_create: %w", err)
			return
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			memfdDev.err = fmt.Errorf("fstat a memfd: %w", err)
			return
		}
		memfdDev.dev = st.Dev
	})
	return memfdDev.dev, memfdDev.err
}
