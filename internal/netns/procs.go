package netns

import (
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// nsID identifies a namespace by the device and inode of its nsfs file.
type nsID struct{ dev, ino uint64 }

func statNS(path string) (nsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return nsID{}, err
	}
	return nsID{uint64(st.Dev), st.Ino}, nil
}

// Pids returns every process (other than this one) whose namespace of
// kind ("net", "pid", ... as in /proc/PID/ns) is one of the namespace
// files in nsPaths. A zombie has no namespace links, so it is not listed.
func Pids(kind string, nsPaths ...string) []int {
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
		id, err := statNS(filepath.Join("/proc", e.Name(), "ns", kind))
		if err == nil && want[id] {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Signal sends sig to every process in the network namespaces nsPaths and
// waits up to wait for them all to be gone. It reports the pids left.
func Signal(nsPaths []string, sig syscall.Signal, wait time.Duration) []int {
	for _, pid := range Pids("net", nsPaths...) {
		_ = syscall.Kill(pid, sig) // an error: already gone
	}
	for deadline := time.Now().Add(wait); ; time.Sleep(20 * time.Millisecond) {
		left := Pids("net", nsPaths...)
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
	}
}
