package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// rdmacmRun is a Debian program that connects through rdma_cm (librdmacm,
// docs/VERBS.md "rdma_cm"), run between two containers: the server's
// command line, the client's (the server's name last), the rdma_cm port
// the server listens on (a TCP port too: they share the port space) and
// what the client's output must show.
type rdmacmRun struct {
	name   string
	server []string
	client []string
	port   int
	want   *regexp.Regexp
	// What the server's log must show, if anything.
	serverWant *regexp.Regexp
	// The server serves until stopped (its exit is not awaited).
	serves bool
}

var rdmacmRuns = []rdmacmRun{
	// -v: each side prints the data it got, which rping checks (-C 10: ten round trips).
	{name: "rping", server: []string{"rping", "-s", "-v", "-C", "10"}, client: []string{"rping", "-c", "-v", "-C", "10", "-a"},
		port: 7174, want: regexp.MustCompile(`(?s)ping data: rdma-ping-0: .*ping data: rdma-ping-9: `),
		serverWant: regexp.MustCompile(`(?s)server ping data: rdma-ping-0: .*server ping data: rdma-ping-9: `)},
	{name: "ucmatose", server: []string{"ucmatose"}, client: []string{"ucmatose", "-s"},
		port: 7471, want: regexp.MustCompile(`(?s)data transfers complete.*test complete`),
		serverWant: regexp.MustCompile(`(?s)data transfers complete.*test complete`)},
	// The synchronous API (rdma_getaddrinfo, rdma_create_ep, rdma_get_request): ids migrated to channels of their own.
	{name: "rdma_server", server: []string{"rdma_server"}, client: []string{"rdma_client", "-s"},
		port: 7471, want: regexp.MustCompile(`rdma_client: end 0`), serverWant: regexp.MustCompile(`rdma_server: end 0`)},
	// 50 connections set up and torn down at once (events of many ids on one channel), timed by step.
	{name: "cmtime 50", server: []string{"cmtime", "-c", "50"}, client: []string{"cmtime", "-c", "50", "-s"},
		port: 7471, want: regexp.MustCompile(`(?s)connect\s*:.*disconnect\s*:`), serves: true},
	// UD: the listener's QP and Q_Key come in the connector's ESTABLISHED (IB's SIDR); the listener
	// answers each datagram through an address handle made from its work completion, and exits
	// as soon as its replies completed (the agent keeps a dead sender's lane for its receiver).
	{name: "udaddy", server: []string{"udaddy"}, client: []string{"udaddy", "-s"},
		port: 7174, want: regexp.MustCompile(`(?s)initiating data transfers.*receiving data transfers.*data transfers complete`)},
	{name: "send_lat -R", server: []string{"ib_send_lat", "-R", "-F", "-n", "1000"}, client: []string{"ib_send_lat", "-R", "-F", "-n", "1000"},
		port: 18515, want: perftestRow},
	{name: "write_bw -R", server: []string{"ib_write_bw", "-R", "-F", "-s", "65536"}, client: []string{"ib_write_bw", "-R", "-F", "-s", "65536"},
		port: 18515, want: perftestRow},
}

// runRdmacmPrograms runs each program's server on h1 and its client on clientHost; both must exit 0.
func runRdmacmPrograms(t *testing.T, c *testenv.Cluster, clientHost string) {
	t.Helper()
	for _, r := range rdmacmRuns {
		t.Run(strings.ReplaceAll(r.name, " ", "_"), func(t *testing.T) {
			srv := testenv.RandomName("cm", 5)
			c.StartDetached(t, "h1", srv, nil, "sh", "-c", strings.Join(r.server, " ")+`; echo "exit=$?"`)
			c.WaitListening(t, srv, r.port)
			// Line-buffered: what a client killed by the timeout printed is in its output.
			argv := append(append([]string{"timeout", "60", "stdbuf", "-oL"}, r.client...), srv)
			cl := c.FF(t, append([]string{"run", "--host", clientHost, "--name", testenv.RandomName("a", 5), "--rm", "--"}, argv...)...)
			if cl.Code != 0 || !r.want.MatchString(cl.Stdout) {
				t.Fatalf("%s client: exit %d, no result in its output:\n%s\n%s\nserver:\n%s", r.name, cl.Code, cl.Stdout, cl.Stderr,
					c.FF(t, "logs", srv).Stdout)
			}
			t.Logf("%s client:\n%s", r.name, cl.Stdout)
			if r.serves {
				return
			}
			testenv.WaitFor(t, srv+" to finish", func() bool {
				return strings.Contains(c.FF(t, "logs", srv).Stdout, "exit=")
			})
			if logs := c.FF(t, "logs", srv).Stdout; !strings.Contains(logs, "exit=0") || (r.serverWant != nil && !r.serverWant.MatchString(logs)) {
				t.Fatalf("%s server:\n%s", r.name, logs)
			}
		})
	}
}

var rdmacmTools = []string{"rping", "ucmatose", "udaddy", "rdma_server", "rdma_client", "cmtime", "ib_send_lat", "ib_write_bw"}

// TestRdmaCMDebianProgramsBetweenContainers: Debian's rping (its data
// checked, -v), ucmatose, rdma_server/rdma_client, cmtime, udaddy (UD) and
// perftest with -R, unmodified, connect through
// the stock librdmacm between two containers on one host, addressed by
// their overlay names.
func TestRdmaCMDebianProgramsBetweenContainers(t *testing.T) {
	if m := testenv.Missing(rdmacmTools...); m != "" {
		t.Skip(m)
	}
	runRdmacmPrograms(t, newCluster(t, 1), "h1")
}

// TestRdmaCMDebianProgramsAcrossHosts: the same between a container on h1
// and one on h2 (the CM's TCP connection on the overlay, the QPs over the
// agents' connection).
func TestRdmaCMDebianProgramsAcrossHosts(t *testing.T) {
	if m := testenv.Missing(rdmacmTools...); m != "" {
		t.Skip(m)
	}
	runRdmacmPrograms(t, newCluster(t, 2), "h2")
}
