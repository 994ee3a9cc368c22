package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

var (
	devinfoLID  = regexp.MustCompile(`port_lid:\s+(\d+)`)
	devinfoGUID = regexp.MustCompile(`node_guid:\s+([0-9a-f:]+)`)
	devinfoGID  = regexp.MustCompile(`GID\[\s*0\]:\s+(\S+)`)
)

// TestVerbsDeviceInEveryContainer: Debian's ibv_devinfo, unmodified, finds
// the container's virtual verbs device ffv0 through the stock libibverbs,
// its port active, with a LID, node GUID and GID of its own derived from
// the container's overlay address; --no-rdma and --no-freeflow containers
// have no device.
func TestVerbsDeviceInEveryContainer(t *testing.T) {
	if m := testenv.Missing("ibv_devinfo", "ibv_devices"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 1)
	seen := map[string]string{}
	for i := 0; i < 2; i++ {
		name := testenv.RandomName("v", 5)
		c.StartDetached(t, "h1", name, nil, "sleep", "600")
		out := c.MustFF(t, "exec", name, "--", "ibv_devinfo", "-v")
		for _, want := range []string{"hca_id:\tffv0", "state:\t\t\tPORT_ACTIVE (4)", "link_layer:\t\tInfiniBand"} {
			if !strings.Contains(out, want) {
				t.Fatalf("ibv_devinfo in %s lacks %q:\n%s", name, want, out)
			}
		}
		ip := containerIP(t, c, name)
		lid, guid, gid := devinfoLID.FindStringSubmatch(out), devinfoGUID.FindStringSubmatch(out), devinfoGID.FindStringSubmatch(out)
		if lid == nil || guid == nil || gid == nil {
			t.Fatalf("ibv_devinfo -v in %s shows no LID, node GUID or GID 0:\n%s", name, out)
		}
		a := net.ParseIP(ip).To4()
		if want := fmt.Sprint(int(a[2])<<8 | int(a[3])); lid[1] != want {
			t.Errorf("%s (%s): port_lid %s, want %s", name, ip, lid[1], want)
		}
		if want := fmt.Sprintf("02ff:ff00:%02x%02x:%02x%02x", a[0], a[1], a[2], a[3]); guid[1] != want {
			t.Errorf("%s (%s): node_guid %s, want %s", name, ip, guid[1], want)
		}
		if want := fmt.Sprintf("0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x", a[0], a[1], a[2], a[3]); gid[1] != want {
			t.Errorf("%s (%s): GID 0 %s, want %s", name, ip, gid[1], want)
		}
		if other, ok := seen[guid[1]]; ok {
			t.Errorf("%s and %s have the same node GUID %s", other, name, guid[1])
		}
		seen[guid[1]] = name
	}
	for _, flag := range []string{"--no-rdma", "--no-freeflow"} {
		// As on a machine without RDMA: libibverbs finds no device class at all.
		r := c.FF(t, "run", "--host", "h1", "--name", testenv.RandomName("n", 5), "--rm", flag, "--", "ibv_devices")
		if r.Code == 0 || strings.Contains(r.Stdout+r.Stderr, "ffv0") {
			t.Errorf("ibv_devices in a %s container: exit %d, want a failure and no ffv0\nstdout: %s\nstderr: %s", flag, r.Code, r.Stdout, r.Stderr)
		}
	}
}

// verbsRun is one Debian verbs program run between two containers: the
// server's and the client's command lines (the client gets the server's
// name last), and what the client's output must show; the server's too
// unless it is the passive end of a one-sided test, which reports nothing.
type verbsRun struct {
	name    string
	argv    []string
	want    *regexp.Regexp
	passive bool
}

var (
	pingpongDone = regexp.MustCompile(`\d+ iters in [0-9.]+ seconds`)
	// A perftest result line: the message size, then the iterations, then numbers.
	perftestRow = regexp.MustCompile(`(?m)^\s*\d+\s+\d+\s+[0-9.]+\s+[0-9.]+`)
)

var debianVerbsTools = []string{"ibv_rc_pingpong", "ibv_ud_pingpong", "ibv_srq_pingpong", "ib_send_lat", "ib_write_lat",
	"ib_read_lat", "ib_atomic_lat", "ib_send_bw", "ib_write_bw", "ib_read_bw"}

// debianVerbsRuns are the Debian programs run between two containers, on one
// host and on two: each validates what it receives where it can.
var debianVerbsRuns = []verbsRun{
	{"rc_pingpong 1 B", []string{"ibv_rc_pingpong", "-c", "-s", "1", "-n", "500"}, pingpongDone, false},
	{"rc_pingpong 4 KiB", []string{"ibv_rc_pingpong", "-c", "-s", "4096", "-n", "500"}, pingpongDone, false},
	{"rc_pingpong 3 MiB", []string{"ibv_rc_pingpong", "-c", "-s", "3145728", "-n", "20", "-r", "4"}, pingpongDone, false},
	{"ud_pingpong 1 B", []string{"ibv_ud_pingpong", "-c", "-s", "1", "-n", "500"}, pingpongDone, false},
	{"ud_pingpong 4 KiB", []string{"ibv_ud_pingpong", "-c", "-s", "4096", "-n", "500"}, pingpongDone, false},
	{"ud_pingpong GRH", []string{"ibv_ud_pingpong", "-c", "-g", "0", "-s", "2048", "-n", "500"}, pingpongDone, false},
	// 16 QPs take their receives from one SRQ; 1 MiB messages go in pieces that interleave in it.
	{"srq_pingpong 4 KiB", []string{"ibv_srq_pingpong", "-c", "-s", "4096", "-n", "500"}, pingpongDone, false},
	{"srq_pingpong 1 MiB", []string{"ibv_srq_pingpong", "-c", "-s", "1048576", "-n", "20", "-r", "64"}, pingpongDone, false},
	{"send_lat", []string{"ib_send_lat", "-F", "-a", "-n", "200"}, perftestRow, false},
	{"write_lat", []string{"ib_write_lat", "-F", "-a", "-n", "200"}, perftestRow, false},
	{"read_lat", []string{"ib_read_lat", "-F", "-s", "4096"}, perftestRow, true},
	{"atomic_lat", []string{"ib_atomic_lat", "-F"}, perftestRow, true},
	{"send_bw", []string{"ib_send_bw", "-F", "-s", "65536"}, perftestRow, false},
	{"write_bw", []string{"ib_write_bw", "-F", "-s", "65536"}, perftestRow, false},
	{"read_bw", []string{"ib_read_bw", "-F", "-s", "65536"}, perftestRow, false},
	// Completion events (-e): each end sleeps in ibv_get_cq_event, woken by the other's doorbell.
	{"events rc_pingpong 4 KiB", []string{"ibv_rc_pingpong", "-e", "-c", "-s", "4096", "-n", "500"}, pingpongDone, false},
	{"events rc_pingpong 3 MiB", []string{"ibv_rc_pingpong", "-e", "-c", "-s", "3145728", "-n", "20", "-r", "4"}, pingpongDone, false},
	{"events ud_pingpong 2 KiB", []string{"ibv_ud_pingpong", "-e", "-c", "-s", "2048", "-n", "500"}, pingpongDone, false},
	{"events srq_pingpong 4 KiB", []string{"ibv_srq_pingpong", "-e", "-c", "-s", "4096", "-n", "500"}, pingpongDone, false},
	{"events send_lat", []string{"ib_send_lat", "-F", "-e", "-a", "-n", "200"}, perftestRow, false},
	{"events send_bw", []string{"ib_send_bw", "-F", "-e", "-s", "65536"}, perftestRow, false},
	// perftest refuses -e for WRITE ("Events feature not available on WRITE verb").
	{"events read_bw", []string{"ib_read_bw", "-F", "-e", "-s", "65536"}, perftestRow, false},
}

// TestVerbsDebianProgramsBetweenContainers: Debian's ibv_rc_pingpong and
// ibv_ud_pingpong and ibv_srq_pingpong (16 QPs sharing one SRQ; all
// validating received buffers) and perftest's latency and bandwidth tools,
// unmodified, between two containers on one host through their virtual
// devices, polling and with completion events (-e): both ends exit 0 and
// report their results.
func TestVerbsDebianProgramsBetweenContainers(t *testing.T) {
	if m := testenv.Missing(debianVerbsTools...); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 1)
	runVerbsPrograms(t, c, "h1", debianVerbsRuns)
}

// runVerbsPrograms runs each program's server on h1 and its client on
// clientHost; both ends must exit 0 and show their results.
func runVerbsPrograms(t *testing.T, c *testenv.Cluster, clientHost string, runs []verbsRun) {
	t.Helper()
	for _, r := range runs {
		t.Run(strings.ReplaceAll(r.name, " ", "_"), func(t *testing.T) {
			srv := testenv.RandomName("vs", 5)
			// The server's exit status goes to its log: both ends must succeed.
			c.StartDetached(t, "h1", srv, nil, "sh", "-c", strings.Join(r.argv, " ")+`; echo "exit=$?"`)
			c.WaitListening(t, srv, 18515)
			cl := runClient(t, c, clientHost, nil, append(append([]string{"timeout", "60"}, r.argv...), srv)...)
			if !r.want.MatchString(cl.Stdout) {
				t.Fatalf("%s client: no result in its output:\n%s\n%s", r.name, cl.Stdout, cl.Stderr)
			}
			testenv.WaitFor(t, srv+" to finish", func() bool {
				return strings.Contains(c.FF(t, "logs", srv).Stdout, "exit=")
			})
			if logs := c.FF(t, "logs", srv).Stdout; !strings.Contains(logs, "exit=0") || !(r.passive || r.want.MatchString(logs)) {
				t.Fatalf("%s server:\n%s", r.name, logs)
			}
		})
	}
}

// TestVerbsDebianProgramsAcrossHosts: the same unmodified programs between
// a container on h1 and one on h2, their RC QPs connected over the
// connection the two agents make, their UD datagrams over lanes that are
// connections too (docs/VERBS.md, "Across hosts"): every buffer checked
// (-c), one-sided requests to a passive target, completion events;
// `freeflow conns --qps` lists the pair on host-tcp.
func TestVerbsDebianProgramsAcrossHosts(t *testing.T) {
	if m := testenv.Missing(debianVerbsTools...); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	runVerbsPrograms(t, c, "h2", debianVerbsRuns)
	s, k := verbsPair(t, c, "h2", "ibv_rc_pingpong -n 1000000000", true)
	t.Logf("freeflow conns --qps:\n%s", c.MustFF(t, "conns", "--qps"))
	c.MustFF(t, "rm", "-f", s.Container, k.Container)
}

// TestVerbsQPsOfTenantsThatMayNotTalk: a verbs program in another tenant's
// container cannot connect its QP to this one's (as a TCP connection
// between them would be refused): its first request fails, nothing hangs,
// and the server gets nothing.
func TestVerbsQPsOfTenantsThatMayNotTalk(t *testing.T) {
	if m := testenv.Missing("ibv_rc_pingpong"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 1)
	srv := testenv.RandomName("vt", 5)
	c.StartDetached(t, "h1", srv, []string{"--tenant", "red"}, "sh", "-c", `timeout 5 ibv_rc_pingpong -n 5; echo "exit=$?"`)
	c.WaitListening(t, srv, 18515)
	r := c.FF(t, "run", "--host", "h1", "--name", testenv.RandomName("vt", 5), "--tenant", "blue", "--rm", "--",
		"timeout", "20", "ibv_rc_pingpong", "-n", "5", srv)
	// The QP exchange over TCP works (the overlay carries it); the QP's first request fails.
	if r.Code == 0 || r.Code == 124 || pingpongDone.MatchString(r.Stdout) ||
		!strings.Contains(r.Stdout+r.Stderr, "retry counter exceeded") {
		t.Fatalf("ibv_rc_pingpong across tenants: exit %d, want a failed first request (retries exceeded), not a timeout\nstdout: %s\nstderr: %s",
			r.Code, r.Stdout, r.Stderr)
	}
	testenv.WaitWithin(t, 30*time.Second, srv+" to finish", func() bool {
		return strings.Contains(c.FF(t, "logs", srv).Stdout, "exit=")
	})
	if logs := c.FF(t, "logs", srv).Stdout; pingpongDone.MatchString(logs) {
		t.Fatalf("the server of another tenant exchanged data:\n%s", logs)
	}
}

// TestVerbsRdmaCoreTestSuite runs rdma-core's own tests (Debian's
// python3-pyverbs ships them) for the device, PDs, MRs, CQs, QPs, SRQs,
// atomics and address handles against a container's device: none may
// fail; what they skip is logged (features the device does not report:
// extended QPs, UC, device memory, memory windows, XRC, ODP, parent
// domains, tag matching, rereg). rdma-core 44's suite has no SRQ tests of
// its own: 56.1's test_srq.py (from the source install-deps fetched) runs
// through testdata/pyverbs/test_srq44.py, and its three tests must pass.
func TestVerbsRdmaCoreTestSuite(t *testing.T) {
	// rdma-core's source, which scripts/install-deps.sh fetches to build the provider.
	srqTests := filepath.Join(rdmaCoreSource(), "tests", "test_srq.py")
	if _, err := os.Stat(srqTests); err != nil {
		t.Fatalf("rdma-core's source (scripts/install-deps.sh fetches it): %v", err)
	}
	srq44, _ := filepath.Abs("testdata/pyverbs/test_srq44.py")
	dir := rdmaCoreTests(t, "cp "+srqTests+" "+srq44+" tests/")
	c := newCluster(t, 1)
	r := c.FF(t, "run", "--host", "h1", "--name", testenv.RandomName("py", 5), "--rm", "-v", dir+":/tmp/pyt:ro", "--",
		"sh", "-c", "cd /tmp && exec python3 /tmp/pyt/tests/run_tests.py --dev ffv0 -v test_device test_pd test_mr test_cq test_qp test_atomic "+
			"test_addr test_srq44 test_odp test_parent_domain test_tag_matching")
	out := r.Stdout + r.Stderr
	ran := regexp.MustCompile(`Ran (\d+) tests`).FindStringSubmatch(out)
	ok := regexp.MustCompile(`(?m) \.\.\. ok$`).FindAllString(out, -1)
	if r.Code != 0 || ran == nil || strings.Contains(out, "FAILED") || len(ok) < 40 {
		t.Fatalf("rdma-core's tests: exit %d, %d passed, want none failed and at least 40 passed:\n%s", r.Code, len(ok), out)
	}
	for _, name := range []string{"test_rc_srq_traffic", "test_resize_srq", "test_modify_srq_limit"} {
		// "name (module.Class.name)", its docstring's first line on the next line if it has one, then "... ok".
		if !regexp.MustCompile(`(?m)^` + name + ` \([^)]*\)(\n[^\n]*)? \.\.\. ok$`).MatchString(out) {
			t.Errorf("rdma-core's SRQ test %s did not pass:\n%s", name, out)
		}
	}
	skips := map[string]int{}
	for _, m := range regexp.MustCompile(`skipped '([^']*)'`).FindAllStringSubmatch(out, -1) {
		skips[m[1]]++
	}
	t.Logf("rdma-core's tests: %s run, %d passed; skipped: %v", ran[1], len(ok), skips)
}

// rdmaCoreTests copies rdma-core's test suite, uncompressed (Debian
// compresses most of its files), into a directory a container can read
// (as /tmp/pyt), then runs more, a shell command, there.
func rdmaCoreTests(t *testing.T, more string) string {
	t.Helper()
	const suite = "/usr/share/doc/rdma-core/tests"
	if m := testenv.Missing("python3"); m != "" {
		t.Skip(m)
	}
	if _, err := os.Stat(suite + "/run_tests.py"); err != nil {
		t.Skipf("rdma-core's test suite is not installed (python3-pyverbs): %v", err)
	}
	dir := t.TempDir()
	c := exec.Command("sh", "-c", "cp -r "+suite+" tests && gunzip -f tests/*.gz && "+more)
	c.Dir = dir
	if out, err := c.CombinedOutput(); err != nil {
		t.Fatalf("copy rdma-core's tests: %v\n%s", err, out)
	}
	os.Chmod(dir, 0o755)
	return dir
}

// TestRdmaCMRdmaCoreTests runs rdma-core's rdma_cm tests (test_rdmacm:
// two processes in one container connect through librdmacm to the
// container's overlay address, then SEND, READ or WRITE) against the
// device: none may fail, at least the 7 that need no multicast pass, and
// what skips is logged. rdma-core 44's base.py finds the address through
// /sys/class/infiniband/<dev>/device/net, a path it does not take from
// SYSFS_PATH as libibverbs does (the container's /sys is the kernel's,
// without the device): the copy reads the device's tree there instead.
func TestRdmaCMRdmaCoreTests(t *testing.T) {
	dir := rdmaCoreTests(t, `sed -i "s|'/sys/class/infiniband/|os.environ['SYSFS_PATH'] + '/class/infiniband/|g" tests/base.py && `+
		`grep -q "os.environ\['SYSFS_PATH'\] + '/class/infiniband/{}/device/net/'" tests/base.py`)
	c := newCluster(t, 1)
	r := c.FF(t, "run", "--host", "h1", "--name", testenv.RandomName("py", 5), "--rm", "-v", dir+":/tmp/pyt:ro", "--",
		"sh", "-c", "cd /tmp && exec timeout 600 python3 /tmp/pyt/tests/run_tests.py --dev ffv0 -v test_rdmacm")
	out := r.Stdout + r.Stderr
	ran := regexp.MustCompile(`Ran (\d+) tests`).FindStringSubmatch(out)
	passed := regexp.MustCompile(`(?m)^(test_\w+) \([^)]*\)(?:\n[^\n]*)? \.\.\. ok$`).FindAllStringSubmatch(out, -1)
	if r.Code != 0 || ran == nil || strings.Contains(out, "FAILED") || len(passed) < 7 {
		t.Fatalf("rdma-core's rdma_cm tests: exit %d, %d passed, want none failed and at least 7 passed:\n%s", r.Code, len(passed), out)
	}
	var names []string
	for _, m := range passed {
		names = append(names, m[1])
	}
	skipped := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^(test_\w+) \([^)]*\)(?:\n[^\n]*)? \.\.\. skipped '([^']*)'`).FindAllStringSubmatch(out, -1) {
		skipped[m[1]] = m[2]
	}
	t.Logf("rdma-core's rdma_cm tests: %s run; passed: %v; skipped: %v", ran[1], names, skipped)
}

// rdmaCoreSource is where scripts/install-deps.sh unpacked rdma-core's
// source (lib/Makefile's RDMA_CORE; FF_RDMA_CORE overrides it).
func rdmaCoreSource() string {
	if d := os.Getenv("FF_RDMA_CORE"); d != "" {
		return d
	}
	return "/var/cache/freeflow/rdma-core-56.1"
}

// verbsListed returns the entries of `freeflow conns <flag> -o json`.
func verbsListed[T any](t *testing.T, c *testenv.Cluster, flag string) []T {
	t.Helper()
	var all []T
	out := c.MustFF(t, "conns", flag, "-o", "json")
	must(t, json.Unmarshal([]byte(out), &all), "parse `freeflow conns %s -o json`: %s", flag, out)
	return all
}

// qpsOf returns the QPs `freeflow conns --qps` lists for container name.
func qpsOf(t *testing.T, c *testenv.Cluster, name string) []agentapi.QPInfo {
	t.Helper()
	var mine []agentapi.QPInfo
	for _, q := range verbsListed[agentapi.QPInfo](t, c, "--qps") {
		if q.Container == name {
			mine = append(mine, q)
		}
	}
	return mine
}

// verbsPair starts a verbs server in a container on h1 and its client in
// one on cliHost, running cmd (the client with the server's name) until
// the test removes them, and waits until `freeflow conns --qps` lists
// their QPs connected to each other (and, if rx, with bytes received), on
// shm on one host, host-tcp across two. It returns the server's QP and the
// client's.
func verbsPair(t *testing.T, c *testenv.Cluster, cliHost, cmd string, rx bool) (agentapi.QPInfo, agentapi.QPInfo) {
	t.Helper()
	srv, cli := testenv.RandomName("vq", 5), testenv.RandomName("vq", 5)
	path := "shm"
	if cliHost != "h1" {
		path = "host-tcp"
	}
	c.StartDetached(t, "h1", srv, nil, "sh", "-c", "timeout 120 "+cmd)
	c.WaitListening(t, srv, 18515)
	c.StartDetached(t, cliHost, cli, nil, "sh", "-c", "timeout 120 "+cmd+" "+srv)
	var s, k []agentapi.QPInfo
	testenv.WaitFor(t, cmd+": both QPs connected", func() bool {
		s, k = qpsOf(t, c, srv), qpsOf(t, c, cli)
		return len(s) == 1 && len(k) == 1 && s[0].State == "connected" && k[0].State == "connected" &&
			(!rx || s[0].RxBytes > 0 && k[0].RxBytes > 0)
	})
	for _, pair := range [][2]agentapi.QPInfo{{s[0], k[0]}, {k[0], s[0]}} {
		q, peer := pair[0], pair[1]
		if q.Type != "RC" || q.Path != path || q.PeerContainer != peer.Container || q.PeerQPN != peer.QPN || q.QPN == 0 {
			t.Fatalf("%s: QP of %s listed %+v; want RC on %s connected to %s's QP %#x", cmd, q.Container, q, path, peer.Container, peer.QPN)
		}
	}
	return s[0], k[0]
}

// verbsMemOf returns what `freeflow conns --regions` lists per container.
func verbsMemOf(t *testing.T, c *testenv.Cluster) map[string]agentapi.VerbsMemInfo {
	t.Helper()
	mem := map[string]agentapi.VerbsMemInfo{}
	for _, m := range verbsListed[agentapi.VerbsMemInfo](t, c, "--regions") {
		mem[m.Container] = m
	}
	return mem
}

// TestVerbsConnsListsQueuePairs: while Debian's ibv_rc_pingpong runs
// between two containers, `freeflow conns --qps` lists each one's RC QP
// connected to the other's, on shm, with the bytes the peer sent into its
// ring growing; `--regions` counts each container's QP and the memfd held
// for it (ibv_rc_pingpong's buffer allows no remote access: no region),
// and, while perftest's ib_write_bw runs, its region of remote-writable
// memory too; once the programs are gone, so are their QPs and memfds.
func TestVerbsConnsListsQueuePairs(t *testing.T) {
	if m := testenv.Missing("ibv_rc_pingpong", "ib_write_bw"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 1)
	s, k := verbsPair(t, c, "h1", "ibv_rc_pingpong -n 1000000000", true)
	later := qpsOf(t, c, s.Container)
	if len(later) != 1 || later[0].RxBytes < s.RxBytes {
		t.Fatalf("the server's QP later: %+v; want its bytes received at least %d", later, s.RxBytes)
	}
	table := c.MustFF(t, "conns", "--qps")
	row := fmt.Sprintf("0x%06x  RC", s.QPN)
	if !strings.HasPrefix(table, "CONTAINER") || !strings.Contains(table, row) || !strings.Contains(table, "connected") {
		t.Fatalf("`freeflow conns --qps` table lacks the server's QP (%q):\n%s", row, table)
	}
	t.Logf("freeflow conns --qps:\n%s", table)
	mem := verbsMemOf(t, c)
	for _, q := range []agentapi.QPInfo{s, k} {
		// Held for the QP: its ring and its doorbell (every RC QP gives one, docs/VERBS.md).
		if m := mem[q.Container]; m.QPs != 1 || m.Regions != 0 || m.Memfds != 2 || m.MemfdLimit < 2 {
			t.Fatalf("--regions for %s: %+v; want its one QP and the two files held for it, its ring and its doorbell", q.Container, m)
		}
	}

	ws, wk := verbsPair(t, c, "h1", "ib_write_bw -F -s 4096 -D 100", false)
	mem = verbsMemOf(t, c)
	for _, q := range []agentapi.QPInfo{ws, wk} {
		if m := mem[q.Container]; m.QPs != 1 || m.Regions < 1 || m.RegionBytes < 4096 || m.Memfds < 2 || m.MemfdLimit < m.Memfds {
			t.Fatalf("--regions for %s running ib_write_bw: %+v; want its QP, its region of at least 4 KiB and a memfd for each", q.Container, m)
		}
	}
	t.Logf("freeflow conns --regions:\n%s", c.MustFF(t, "conns", "--regions"))

	gone := []string{s.Container, k.Container, ws.Container, wk.Container}
	c.MustFF(t, append([]string{"rm", "-f"}, gone...)...)
	testenv.WaitFor(t, "the QPs of the removed containers forgotten", func() bool {
		for _, name := range gone {
			if len(qpsOf(t, c, name)) != 0 {
				return false
			}
		}
		return true
	})
	mem = verbsMemOf(t, c)
	for _, name := range gone {
		if m, ok := mem[name]; ok {
			t.Fatalf("--regions after the containers went: %+v", m)
		}
	}
}

// TestUCXBetweenContainers: UCX's own benchmark, ucx_perftest, between two
// FreeFlow containers, same host and cross host, with no UCX setting of
// the user's: UCP's tag matching takes rc_verbs on ffv0 (UCX's log says
// so), and its latency and bandwidth tests finish.
func TestUCXBetweenContainers(t *testing.T) {
	if m := testenv.Missing("ucx_perftest"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	for _, host := range []string{"h1", "h2"} {
		for _, test := range []string{"tag_lat", "tag_bw"} {
			t.Run(host+"_"+test, func(t *testing.T) {
				srv := testenv.RandomName("us", 5)
				c.StartDetached(t, "h1", srv, nil, "sh", "-c", `timeout 60 ucx_perftest -p 13337; echo "exit=$?"`)
				c.WaitListening(t, srv, 13337)
				cl := runClient(t, c, host, []string{"--env", "UCX_LOG_LEVEL=info"},
					"timeout", "60", "ucx_perftest", srv, "-p", "13337", "-t", test, "-s", "65536", "-n", "2000")
				out := cl.Stdout + cl.Stderr
				if !strings.Contains(out, "Final:") || !strings.Contains(out, "tag(rc_verbs/ffv0:1)") {
					t.Fatalf("ucx_perftest %s from %s: no result, or UCX did not take rc_verbs on ffv0:\n%s", test, host, out)
				}
				testenv.WaitFor(t, srv+" to finish", func() bool {
					return strings.Contains(c.FF(t, "logs", srv).Stdout, "exit=")
				})
				if logs := c.FF(t, "logs", srv).Stdout; !strings.Contains(logs, "exit=0") {
					t.Fatalf("ucx_perftest server:\n%s", logs)
				}
			})
		}
	}
}
