package e2e

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/freeflow-net/freeflow/internal/openmpi"
	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// mpiLaunch runs mpirun in h1's host namespace for ranks in containers c1
// and c2, over transport (see internal/openmpi).
func mpiLaunch(c *testenv.Cluster, agent string, ranks []string, transport []string, argv ...string) ([]byte, error) {
	args := append([]string{"60", "mpirun", "--host", strings.Join(ranks, ","), "-np", strconv.Itoa(len(ranks))}, openmpi.Args(agent)...)
	args = append(args, transport...)
	host := state.NetNSPath(state.NewLayout(c.Name).HostNetNS("h1"))
	return netns.Command(host, "timeout", append(args, argv...)...).CombinedOutput()
}

// mpiCluster is a two-host cluster and Open MPI's launch agent for it, in
// dir, which the rank containers mount.
func mpiCluster(t *testing.T) (c *testenv.Cluster, dir, agent string) {
	t.Helper()
	if m := testenv.Missing("mpirun", "NPopenmpi", "timeout"); m != "" {
		t.Skip(m)
	}
	c = newCluster(t, 2)
	dir = t.TempDir()
	agent, err := openmpi.WriteAgent(dir, filepath.Join(c.BinDir, "freeflow"), c.Name)
	must(t, err, "write the launch agent")
	return c, dir, agent
}

// TestOpenMPI: NetPIPE's MPI build checks the integrity of messages of up
// to 1 MiB between two ranks in containers, same host and cross host, on
// the overlay and on the fast paths.
func TestOpenMPI(t *testing.T) {
	c, dir, agent := mpiCluster(t)
	for _, m := range modes {
		for _, host := range []string{"h1", "h2"} {
			t.Run(m.name+"-"+host, func(t *testing.T) {
				flags := append([]string{"-v", dir + ":" + dir + ":ro"}, m.flags...)
				c1, c2 := testenv.RandomName("r", 4), testenv.RandomName("r", 4)
				c.StartDetached(t, "h1", c1, flags, "sleep", "3600")
				c.StartDetached(t, host, c2, flags, "sleep", "3600")
				want, involved := m.sameHost, []string{"h1"}
				if host != "h1" {
					want, involved = m.cross, []string{"h1", "h2"}
				}
				paths := watchPaths(t, c, involved...)
				out, err := mpiLaunch(c, agent, []string{c1, c2}, openmpi.TCP(), "NPopenmpi", "-i", "-n", "20", "-p", "0", "-u", "1048576", "-o", "/tmp/np.out")
				must(t, err, "mpirun NPopenmpi: %s", out)
				netpipeIntact(t, string(out))
				if want == "none" {
					paths.expect(t, want, "")
				} else {
					paths.expectMPI(t, want)
				}
			})
		}
	}
}

// TestOpenMPIOverVerbs: Open MPI through UCX between ranks in two FreeFlow
// containers, same host and cross host, with no setting of the user's:
// UCX takes the containers' virtual verbs devices (its rc_verbs transport
// on ffv0, which UCX's log names), and NetPIPE's integrity mode checks
// every message of up to 1 MiB.
func TestOpenMPIOverVerbs(t *testing.T) {
	c, dir, agent := mpiCluster(t)
	for _, host := range []string{"h1", "h2"} {
		t.Run(host, func(t *testing.T) {
			c1, c2 := testenv.RandomName("r", 4), testenv.RandomName("r", 4)
			flags := []string{"-v", dir + ":" + dir + ":ro"}
			c.StartDetached(t, "h1", c1, flags, "sleep", "3600")
			c.StartDetached(t, host, c2, flags, "sleep", "3600")
			out, err := mpiLaunch(c, agent, []string{c1, c2}, append(openmpi.UCX(), "-x", "UCX_LOG_LEVEL=info"),
				"NPopenmpi", "-i", "-n", "20", "-p", "0", "-u", "1048576", "-o", "/tmp/np.out")
			must(t, err, "mpirun NPopenmpi over UCX: %s", out)
			netpipeIntact(t, string(out))
			if !strings.Contains(string(out), "tag(rc_verbs/ffv0:1)") {
				t.Fatalf("UCX did not take the verbs device between the ranks (no tag(rc_verbs/ffv0:1) in its log):\n%s", out)
			}
		})
	}
}

// TestOpenMPIOverVerbsAllreduce: an MPI job of 4 ranks in 4 FreeFlow
// containers, two on each host, through UCX on their verbs devices: each
// rank checks the results of reductions of one number and of 1 Mi doubles
// (UCX's rendezvous), ten rounds.
func TestOpenMPIOverVerbsAllreduce(t *testing.T) {
	if m := testenv.Missing("mpicc"); m != "" {
		t.Skip(m)
	}
	c, dir, agent := mpiCluster(t)
	prog := filepath.Join(dir, "allreduce")
	if out, err := exec.Command("mpicc", "-O2", "-o", prog, "testdata/mpi/allreduce.c").CombinedOutput(); err != nil {
		t.Fatalf("mpicc: %v\n%s", err, out)
	}
	var ranks []string
	for _, host := range []string{"h1", "h1", "h2", "h2"} {
		r := testenv.RandomName("r", 4)
		c.StartDetached(t, host, r, []string{"-v", dir + ":" + dir + ":ro"}, "sleep", "3600")
		ranks = append(ranks, r)
	}
	out, err := mpiLaunch(c, agent, ranks, append(openmpi.UCX(), "-x", "UCX_LOG_LEVEL=info"), prog)
	must(t, err, "mpirun allreduce over UCX: %s", out)
	for r := 0; r < 4; r++ {
		if !strings.Contains(string(out), fmt.Sprintf("rank %d of 4: reductions correct", r)) {
			t.Fatalf("rank %d did not report correct reductions:\n%s", r, out)
		}
	}
	if !strings.Contains(string(out), "rc_verbs/ffv0:1") {
		t.Fatalf("UCX did not take the verbs device between the ranks (no rc_verbs/ffv0:1 in its log):\n%s", out)
	}
}

// expectMPI fails the test unless, on every watched host, the ranks'
// connections to each other all took the fast path fast ("shm", "unix" or
// "host-tcp") and only connections to mpirun took the overlay. Each orted
// connects to mpirun, which runs outside any container (overlay,
// not-a-container); the ranks connect to each other, both at once
// (Open MPI's TCP transport opens a connection from each side and keeps
// one). The counters tell these apart only by reason, so: at least one
// connection on fast, none on another fast path, and every overlay one
// for not-a-container, at least one (its host's orted).
func (p *pathCheck) expectMPI(t *testing.T, fast string) {
	t.Helper()
	for _, h := range p.hosts {
		b, a := p.before[h], counters(t, p.c, h)
		got := pathDeltas(b, a)
		ok := got[fast] > 0
		for k, n := range got {
			ok = ok && (k == fast || k == "overlay" || n == 0)
		}
		toMpirun := a.FallbackReasons["not-a-container"] - b.FallbackReasons["not-a-container"]
		if !ok || toMpirun == 0 || got["overlay"] != toMpirun {
			t.Errorf("%s's agent: want rank-to-rank connections on %s and only orted-to-mpirun ones on the overlay (not-a-container); got %v (reasons now %v, before %v)",
				h, fast, got, a.FallbackReasons, b.FallbackReasons)
		}
	}
}

var netpipeLine = regexp.MustCompile(`(?m)^\s*\d+:\s+(\d+) bytes\s+\d+ times -->\s+(.*)$`)

// netpipeIntact checks NetPIPE's integrity mode output: a line per message
// size, each "Integrity check passed", up to at least 512 KiB.
func netpipeIntact(t *testing.T, out string) {
	t.Helper()
	lines := netpipeLine.FindAllStringSubmatch(out, -1)
	largest := 0
	for _, l := range lines {
		if l[2] != "Integrity check passed" {
			t.Fatalf("NPopenmpi: %s bytes: %s\n%s", l[1], l[2], out)
		}
		largest, _ = strconv.Atoi(l[1])
	}
	if largest < 512<<10 {
		t.Fatalf("NPopenmpi stopped at %d bytes, want at least 512 KiB:\n%s", largest, out)
	}
}
