package bench

import (
	"bufio"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// Machine is what the report opens with: the figures only compare within
// one machine, so it names the one they came from.
type Machine struct {
	CPU       string `json:"cpu"`
	Cores     int    `json:"cores"`
	Kernel    string `json:"kernel"`
	DefaultCC string `json:"default_cc"` // the root namespace's tcp_congestion_control
	// Load is /proc/loadavg's 1, 5 and 15 minute averages when the run
	// started: on a shared machine, other work skews every figure.
	Load [3]float64 `json:"load"`
}

// busyLoad is the 1-minute load above which other work is flagged.
const busyLoad = 0.5

// ThisMachine describes the machine the bench runs on.
func ThisMachine() Machine {
	m := Machine{CPU: cpuModel(), Cores: runtime.NumCPU(), Kernel: kernelRelease()}
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control"); err == nil {
		m.DefaultCC = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		f := strings.Fields(string(b))
		for i := 0; i < 3 && i < len(f); i++ {
			m.Load[i] = atof(f[i])
		}
	}
	return m
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func kernelRelease() string {
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		return "unknown"
	}
	return unix.ByteSliceToString(u.Release[:])
}
