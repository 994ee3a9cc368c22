package bench

import (
	"fmt"
	"runtime"
	"strconv"
)

// pinning puts clients and servers on fixed, different CPUs with taskset.
// With 2 cores, an unpinned ping-pong lets the scheduler move both ends
// around and adds its own noise to every figure; pinned, every path pays
// the same cross-core wake-up and the spread shrinks.
type pinning struct {
	on             bool
	clientCPU, srv int
}

// defaultPinning pins the client to CPU 0 and the servers to CPU 1, or
// nothing on a single-CPU machine.
func defaultPinning() pinning {
	if runtime.NumCPU() < 2 {
		return pinning{}
	}
	return pinning{on: true, clientCPU: 0, srv: 1}
}

func (p pinning) client(argv []string) []string { return p.wrap(p.clientCPU, argv) }
func (p pinning) server(argv []string) []string { return p.wrap(p.srv, argv) }

func (p pinning) wrap(cpu int, argv []string) []string {
	if !p.on {
		return argv
	}
	return append([]string{"taskset", "-c", strconv.Itoa(cpu)}, argv...)
}

// String says what the report should tell about pinning.
func (p pinning) String() string {
	if !p.on {
		return "none (one CPU)"
	}
	return fmt.Sprintf("clients on CPU %d, servers on CPU %d (taskset)", p.clientCPU, p.srv)
}
