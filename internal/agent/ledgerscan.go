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
// "freeflow-ledger". The agent runs as root on the host, so it may take a
// copy of that descriptor (pidfd_getfd); from there it is checked and
// mapped as a handed one (mapLedger), and a memfd already mapped (the
// same inode) is not mapped twice.
//
// Nothing found is trusted more than a handed ledger: the name only
// selects a candidate, and a container can give any file that name. The
// agent never opens the candidate's path (as root, through the
// container's filesystem, where a FUSE or hung NFS file blocks and a
// descriptor swapped in between two looks is a device or a FIFO): it
// takes the open file itself, which must be a regular file on the memfd
// mount (the device of a memfd the agent makes itself), then have a
// ledger's size, seals and header.
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
		n, err := strconv.Atoi(fd.Name())
		if err != nil {
			continue
		}
		if link, err := os.Readlink(dir + "/" + fd.Name()); err != nil || link != ledgerLink {
			continue
		}
		err = takeLedger(pid, n, func(lfd int) error { return a.ledgers.put(pid, c, lfd) })
		if err == nil {
			return true
		}
		a.log.Debug("a process's ledger candidate is no ledger", "pid", pid, "container", c.ID, "fd", n, "err", err)
	}
	return false
}

// takeLedger takes a copy of descriptor fd of process pid, the open file
// itself (pidfd_getfd: no path is walked and nothing is opened, so a file
// of the container's, a FIFO or a device swapped in, costs nothing), and
// calls use with it once it is known to be a memfd; use (mapLedger)
// checks its size, seals and header.
func takeLedger(pid int32, fd int, use func(fd int) error) error {
	dev, err := memfdDevice()
	if err != nil {
		return err
	}
	return withFDOf(pid, fd, func(got int) error {
		var st unix.Stat_t
		if err := unix.Fstat(got, &st); err != nil {
			return err
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Dev != dev {
			return fmt.Errorf("not a memfd (mode %#o, device %d)", st.Mode, st.Dev)
		}
		return use(got)
	})
}

// withFDOf calls use with a copy of descriptor fd of process pid, the open
// file itself (pidfd_getfd), closed when use returns.
func withFDOf(pid int32, fd int, use func(fd int) error) error {
	pidfd, err := unix.PidfdOpen(int(pid), 0)
	if err != nil {
		return fmt.Errorf("pidfd_open: %w", err)
	}
	defer unix.Close(pidfd)
	got, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		return fmt.Errorf("pidfd_getfd: %w", err)
	}
	defer unix.Close(got)
	return use(got)
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
