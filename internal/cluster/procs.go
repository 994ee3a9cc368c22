package cluster

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killGrace is how long processes get to exit after SIGTERM before SIGKILL.
const killGrace = 2 * time.Second

// nsID identifies a namespace by the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// pidsInNetNS returns every process (other than this one) whose network
// namespace is one of the namespace files in nsPaths.
func pidsInNetNS(nsPaths []string) []int {
	want := map[nsID]bool{}
	for _, p := range nsPaths {
		if id, err := statNS(p); err == nil {
			want[id] = true
		}
	}
	if len(want) == 0 {
		return nil
	}
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		id, err := statNS(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err == nil && want[id] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// stopProcesses sends SIGTERM to every process in the namespaces, waits up
// to killGrace for them to exit, then SIGKILLs what is left and waits for it
// to be gone. It reports the pids that survived.
func stopProcesses(nsPaths []string) []int {
	signalAll(pidsInNetNS(nsPaths), syscall.SIGTERM)
	if waitGone(nsPaths, killGrace) {
		return nil
	}
	signalAll(pidsInNetNS(nsPaths), syscall.SIGKILL)
	waitGone(nsPaths, killGrace)
	return pidsInNetNS(nsPaths)
}

func signalAll(pids []int, sig syscall.Signal) {
	for _, pid := range pids {
		// An error means the process is already gone; one that survives
		// both signals is reported by stopProcesses.
		_ = syscall.Kill(pid, sig)
	}
}

// waitGone polls until no process is left in the namespaces or d passes.
// A zombie has no namespace links, so it does not count as left.
func waitGone(nsPaths []string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		if len(pidsInNetNS(nsPaths)) == 0 {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond)
	}
}
