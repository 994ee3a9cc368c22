package bench

import (
	"strings"
	"testing"
)

// nptcp.txt is NPtcp's transmitter with the bench's options on loopback;
// npopenmpi.txt two NPopenmpi ranks over Open MPI's shared memory; and
// nptcp-mismatched.txt a transmitter (-p 0, -u 1 MiB) whose receiver ran
// with NPtcp's defaults (-p 3): it hung after 16 bytes and was killed.

func TestParseNetPIPE(t *testing.T) {
	for _, tc := range []struct {
		file        string
		lat1, lat1M float64 // one-way µs at 1 B and 1 MiB
		gbps1M      float64
	}{
		{"nptcp.txt", 6.30, 247.83, 32.27955},
		{"npopenmpi.txt", 1.67, 371.80, 21.5167},
	} {
		per, err := ParseNetPIPE(string(readTestdata(t, tc.file)))
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if per["1 B"][mAvg] != tc.lat1 || per["1 MiB"][mAvg] != tc.lat1M {
			t.Errorf("%s: latency 1 B %v, 1 MiB %v; want %v, %v", tc.file, per["1 B"][mAvg], per["1 MiB"][mAvg], tc.lat1, tc.lat1M)
		}
		if g := per["1 MiB"][mGbps]; g < tc.gbps1M-1e-3 || g > tc.gbps1M+1e-3 {
			t.Errorf("%s: 1 MiB at %v Gbit/s, want %v", tc.file, g, tc.gbps1M)
		}
		for _, c := range netpipe.Cases(true) {
			if _, ok := per[c.Name]; !ok {
				t.Errorf("%s: no figure for %s, a case the report keeps", tc.file, c.Name)
			}
		}
	}
}

func TestParseNetPIPEStoppedEarly(t *testing.T) {
	_, err := ParseNetPIPE(string(readTestdata(t, "nptcp-mismatched.txt")))
	if err == nil || !strings.Contains(err.Error(), "stopped at 12 bytes") {
		t.Fatalf("a run that stopped early must fail, got %v", err)
	}
}

// TestNetPIPEOptionsMatch: the receiver must walk the same size schedule
// as the transmitter, or the transmitter hangs (see exp_netpipe.go).
func TestNetPIPEOptionsMatch(t *testing.T) {
	srv := netpipe.Server(toolEnv{}).Shell
	cli := strings.Join(netpipe.Client(toolEnv{}, dial{Addr: "10.0.0.1"}, sweepCase, 1), " ")
	if !strings.Contains(srv, netpipeArgs) || !strings.Contains(cli, netpipeArgs) {
		t.Errorf("server %q and client %q must both carry %q", srv, cli, netpipeArgs)
	}
	if !strings.Contains(srv, "while :; do NPtcp") {
		t.Errorf("the receiver serves one run: it must be restarted: %q", srv)
	}
	if !netpipe.Restarts {
		t.Error("clients must wait for the restarted receiver")
	}
}

// TestMpirunArgs: ranks pinned one per CPU, over TCP between two
// containers, over shared memory with both ranks in one.
func TestMpirunArgs(t *testing.T) {
	env := toolEnv{Tools: "/tmp/t"}
	tcp := strings.Join(mpirunArgs(env, dial{Hosts: []string{"c1", "c2"}}), " ")
	for _, want := range []string{"mpirun --host c1,c2 --bind-to none", "--mca plm_rsh_agent /tmp/t/rsh", "--mca btl tcp,self",
		"--mca mpi_yield_when_idle 1", "-np 1 --host c1 taskset -c 0 NPopenmpi -l 1", ": -np 1 --host c2 taskset -c 1 NPopenmpi"} {
		if !strings.Contains(tcp, want) {
			t.Errorf("tcp job lacks %q: %s", want, tcp)
		}
	}
	shm := strings.Join(mpirunArgs(env, dial{Hosts: []string{"c1"}, Transport: TransportMPIShm}), " ")
	for _, want := range []string{"mpirun --host c1:2 --bind-to", "--mca btl vader,self", "-np 1 --host c1:2 taskset -c 0", ": -np 1 --host c1:2 taskset -c 1"} {
		if !strings.Contains(shm, want) {
			t.Errorf("shm job lacks %q: %s", want, shm)
		}
	}
}
