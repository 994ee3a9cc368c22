package bench

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// CPU metrics, from /proc/stat around each client run. Clients are pinned
// to one CPU and servers to the other (pin.go), so each CPU's busy time is
// its side's cost, including the kernel's network work that lands there
// (softirq, veth and bridge forwarding), which a tool's own getrusage does
// not see. The figures include the few milliseconds `freeflow exec` costs
// to start the client, the same on every container path.
const (
	mCPUClient = "cpu_client_pct" // the client CPU's busy time, % of the run
	mCPUServer = "cpu_server_pct" // the server CPU's busy time, % of the run
	mCPUTotal  = "cpu_total_pct"  // all CPUs, % of one CPU
	mCPUPerGB  = "cpu_s_per_gb"   // all CPUs' busy seconds per GB received
)

// cpuTimes is one reading of /proc/stat: busy and total ticks per CPU.
type cpuTimes struct {
	at         time.Time
	busy, all  map[int]uint64
	sumB, sumA uint64
}

// readCPUTimes reads /proc/stat; busy is everything but idle and iowait.
func readCPUTimes() (cpuTimes, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return cpuTimes{}, fmt.Errorf("read CPU times: %w", err)
	}
	defer f.Close()
	return parseCPUTimes(bufio.NewScanner(f)), nil
}

func parseCPUTimes(sc *bufio.Scanner) cpuTimes {
	t := cpuTimes{at: time.Now(), busy: map[int]uint64{}, all: map[int]uint64{}}
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 8 || !strings.HasPrefix(f[0], "cpu") || f[0] == "cpu" {
			continue
		}
		n, err := strconv.Atoi(f[0][3:])
		if err != nil {
			continue
		}
		var all, idle uint64
		for i, v := range f[1:] {
			x, _ := strconv.ParseUint(v, 10, 64)
			if i >= 8 { // guest time is already counted in user
				break
			}
			all += x
			if i == 3 || i == 4 { // idle, iowait
				idle += x
			}
		}
		t.busy[n], t.all[n] = all-idle, all
		t.sumB += all - idle
		t.sumA += all
	}
	return t
}

// cpuMetricsBetween turns two readings into the CPU metrics: the client
// and server CPU as a share of their CPU's time, and the total in % of
// one CPU. bytes > 0 adds CPU seconds per GB.
func cpuMetricsBetween(a, b cpuTimes, pin pinning, bytes float64) map[string]float64 {
	m := map[string]float64{}
	share := func(cpu int) float64 {
		d := b.all[cpu] - a.all[cpu]
		if d == 0 {
			return 0
		}
		return 100 * float64(b.busy[cpu]-a.busy[cpu]) / float64(d)
	}
	if pin.on {
		m[mCPUClient], m[mCPUServer] = share(pin.clientCPU), share(pin.srv)
	}
	cpus := max(1, len(b.all))
	if d := b.sumA - a.sumA; d > 0 {
		m[mCPUTotal] = 100 * float64(cpus) * float64(b.sumB-a.sumB) / float64(d)
	}
	if bytes > 0 {
		busySeconds := m[mCPUTotal] / 100 * b.at.Sub(a.at).Seconds()
		m[mCPUPerGB] = busySeconds / (bytes / 1e9)
	}
	return m
}
