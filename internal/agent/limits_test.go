package agent

import (
	"bufio"
	"encoding/json"
	"errors"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// A holder is a child process in a container's network namespace that
// opens sessions (HELLO each), reports how each went and keeps those that
// were accepted until the parent closes its stdin.
const envHold = "FF_AGENT_TEST_HOLD" // how many sessions to open

// holdChild is the child's side.
func holdChild() int {
	n, _ := strconv.Atoi(os.Getenv(envHold))
	outcomes := map[string]int{}
	var held []*protocol.Conn
	for range n {
		c, how := holdOne(os.Getenv(envSock))
		outcomes[how]++
		if c != nil {
			held = append(held, c)
		}
	}
	json.NewEncoder(os.Stdout).Encode(outcomes)
	io.Copy(io.Discard, os.Stdin)
	for _, c := range held {
		c.Close()
	}
	return 0
}

// holdOne opens one session: "ok" and the connection, or the refusal's
// code and whether the agent then closed the connection.
func holdOne(sock string) (*protocol.Conn, string) {
	c, err := protocol.Dial(sock)
	if err != nil {
		return nil, "dial: " + err.Error()
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if err := c.WriteMsg(protocol.New(protocol.TypeHello, 1)); err != nil {
		c.Close()
		return nil, "write HELLO: " + err.Error()
	}
	m, _, err := c.ReadMsg()
	switch {
	case err != nil:
		c.Close()
		return nil, "read: " + err.Error()
	case m.Type == protocol.TypeHelloReply:
		return c, "ok"
	}
	defer c.Close()
	how := m.Type.String()
	if e := m.Err(); e != nil {
		how = e.Code.String()
	}
	if _, _, err := c.ReadMsg(); closedByPeer(err) {
		return nil, how + " closed"
	}
	return nil, how + " left open"
}

// closedByPeer reports whether a read error says the agent closed the
// connection: EOF, or a reset when it closed with a message unread.
func closedByPeer(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET)
}

// startHolder runs a holder of n sessions in network namespace ns and
// returns what it got; finish ends it.
func startHolder(t *testing.T, ns string, a *testAgent, n int) (map[string]int, *asker) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=hold", envSock+"="+a.cfg.LibrarySocket(), envHold+"="+strconv.Itoa(n))
	cmd.Stderr = os.Stderr
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &asker{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(h.finish)
	got := map[string]int{}
	if line, err := h.out.ReadString('\n'); err != nil || json.Unmarshal([]byte(line), &got) != nil {
		t.Fatalf("holder in %s: %q, %v", ns, line, err)
	}
	return got, h
}

func wantOutcomes(t *testing.T, what string, got, want map[string]int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %v, want %v", what, got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
	}
}

// awaitHolding waits until q counts n for id: a connection's share is
// given back when its goroutine has seen it close.
func awaitHolding(t *testing.T, q *quota, id string, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for q.holding(id) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%q holds %d, want %d", id, q.holding(id), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A container that opens more sessions than its limit is told LIMIT on
// each one beyond it, which the agent then closes; another container, a
// new admin connection and STATUS are served meanwhile; and the container
// gets its share back once its sessions end.
func TestContainerOverSessionLimitLocksOutNobody(t *testing.T) {
	nsA, nsB := makeNetns(t), makeNetns(t)
	a := startAgent(t, newFakeDir(), func(c *Config) { c.SessionsPerContainer = 3 })
	admin := adminClient(t, a)
	for _, c := range []struct{ id, name, ip, ns string }{{"ca", "hog", "10.244.1.2", nsA}, {"cb", "web", "10.244.1.3", nsB}} {
		if err := admin.Register(ctxT(t), container(c.id, c.name, c.ip, c.ns)); err != nil {
			t.Fatal(err)
		}
	}
	got, hog := startHolder(t, nsA, a, 5)
	wantOutcomes(t, "container ca opening 5 sessions with a limit of 3", got, map[string]int{"ok": 3, "LIMIT closed": 2})

	if got := runInNetns(t, nsB, "hello", a, nil)["hello"]; got != "ok cb" {
		t.Errorf("HELLO from container cb while ca is at its limit: %s, want ok cb", got)
	}
	if _, err := adminClient(t, a).Status(ctxT(t)); err != nil {
		t.Errorf("STATUS on a new admin connection while ca is at its limit: %v", err)
	}

	hog.finish()
	awaitHolding(t, a.sessions, "ca", 0)
	got, _ = startHolder(t, nsA, a, 3)
	wantOutcomes(t, "container ca after its sessions ended", got, map[string]int{"ok": 3})
}

// Callers in no registered namespace hold no session: each is a refusal
// (DENIED), at most refusalsStrangers at once for all of them; one more is
// closed at accept; a container gets its full share meanwhile.
func TestStrangersTakeNoContainerShare(t *testing.T) {
	nsA := makeNetns(t)
	a := startAgent(t, newFakeDir(), func(c *Config) { c.SessionsPerContainer = 2 })
	if err := adminClient(t, a).Register(ctxT(t), container("ca", "web", "10.244.1.2", nsA)); err != nil {
		t.Fatal(err)
	}
	// The test process is in no registered namespace: a stranger.
	var silent []*protocol.Conn
	for range refusalsStrangers {
		silent = append(silent, dialRaw(t, a.cfg.LibrarySocket()))
	}
	awaitHolding(t, a.strangerRefusals, strangers, refusalsStrangers)
	over := dialRaw(t, a.cfg.LibrarySocket())
	over.WriteMsg(protocol.New(protocol.TypeHello, 1)) // may find it closed already
	if m, _, err := over.ReadMsg(); !closedByPeer(err) {
		t.Fatalf("a stranger beyond the strangers' refusals: %v, %v; want the connection closed at accept", m, err)
	}

	got, _ := startHolder(t, nsA, a, 2)
	wantOutcomes(t, "container ca while strangers hold all their refusals", got, map[string]int{"ok": 2})

	for _, c := range silent {
		c.Close()
	}
	awaitHolding(t, a.strangerRefusals, strangers, 0)
	c := dialRaw(t, a.cfg.LibrarySocket())
	if err := c.WriteMsg(protocol.New(protocol.TypeHello, 7)); err != nil {
		t.Fatal(err)
	}
	wantError(t, c, protocol.CodeDenied, 7)
	wantClosed(t, c)
}

// A stranger that says nothing is closed after refuseWait, not after the
// HELLO timeout a session gets.
func TestSilentStrangerClosedAfterRefuseWait(t *testing.T) {
	a := startAgent(t, newFakeDir(), func(c *Config) { c.HelloTimeout = time.Minute })
	c := dialRaw(t, a.cfg.LibrarySocket())
	start := time.Now()
	wantClosed(t, c)
	if waited := time.Since(start); waited > refuseWait+2*time.Second {
		t.Errorf("a silent stranger was closed after %v, want about %v", waited, refuseWait)
	}
}

// The admin socket has its own capacity: a connection beyond it is told
// LIMIT, and a container's process is refused (DENIED) without taking a
// place there.
func TestAdminSocketHasItsOwnCapacity(t *testing.T) {
	nsA := makeNetns(t)
	a := startAgent(t, newFakeDir(), func(c *Config) { c.AdminConns = 2 })
	first := adminClient(t, a)
	if err := first.Register(ctxT(t), container("ca", "web", "10.244.1.2", nsA)); err != nil {
		t.Fatal(err)
	}
	if got := runInNetns(t, nsA, "impersonate", a, &selfContainer)["admin"]; got != "DENIED" {
		t.Errorf("a container's process on the admin socket: %s, want DENIED", got)
	}
	adminClient(t, a)
	_, err := agentapi.DialAdmin(a.cfg.AdminSocket)
	wantCode(t, err, protocol.CodeLimit)
	if _, err := first.Status(ctxT(t)); err != nil {
		t.Errorf("STATUS on an admin connection held: %v", err)
	}
}

// Every container may hold its full share of sessions at once: the agent
// raises its open-file limit for every container the subnet can address,
// or, where it cannot (no CAP_SYS_RESOURCE), a container's share is what
// the limit fits for the containers registered.
func TestFileLimitCoversEveryContainerShare(t *testing.T) {
	subnet := netip.MustParsePrefix(testSubnet)
	def := shares{sessions: DefaultSessionsPerContainer, verbsFDs: DefaultVerbsFDs}
	full := fileLimit(subnet, def, DefaultAdminConns)
	if full < 254*(DefaultSessionsPerContainer+DefaultVerbsFDs) {
		t.Fatalf("fileLimit for a /24: %d, below 254 containers at their full share", full)
	}
	if got := sharesFitting(254, DefaultAdminConns, full, def); got != def {
		t.Errorf("254 containers with the files the agent asks for: shares %+v, want %+v", got, def)
	}
	for _, n := range []uint64{1, 3, 10} { // with this sandbox's hard limit
		const have = 20000
		got := sharesFitting(n, DefaultAdminConns, have, def)
		if need := n*uint64(got.sessions+got.verbsFDs+perContainerFDs) + refusalsStrangers + DefaultAdminConns + fdReserve; need > have {
			t.Errorf("%d containers at shares %+v need %d files, more than the %d there are", n, got, need, have)
		}
		if d := got.sessions*DefaultVerbsFDs/DefaultSessionsPerContainer - got.verbsFDs; d < -2 || d > 2 { // rounding
			t.Errorf("%d containers: shares %+v are not lowered in the same proportion", n, got)
		}
	}
	a := startAgent(t, newFakeDir(), nil)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < lim.Max && lim.Cur < full {
		t.Errorf("RLIMIT_NOFILE %d after start: short of what the subnet needs, yet below the hard limit %d", lim.Cur, lim.Max)
	}
	want := def
	if lim.Cur < full {
		want = sharesFitting(0, DefaultAdminConns, lim.Cur, def)
	}
	if got := a.share(); got != want {
		t.Errorf("shares with no container registered and %d files: %+v, want %+v", lim.Cur, got, want)
	}
}

// Parked halves are bounded per connecting container: one container's
// connectors at their share are no longer parked (they wait for the
// ACCEPT as if no rule applied), another container's still are, and a
// parked half claimed or expired gives its place back.
func TestParkedHalvesBoundedPerContainer(t *testing.T) {
	const keep = 100 * time.Millisecond
	r := newRendezvous(keep)
	lis := listenerKey{"acc", 80}
	lisEP := netip.MustParseAddrPort("10.244.1.3:80")
	// The listener's process waits in a CONNECT of its own: connectors to it are parked.
	r.mu.Lock()
	r.beginAskLocked(&connector{pid: 42, mine: map[listenerKey]bool{lis: true}}, sideConnector,
		tuple{conn: netip.MustParseAddrPort("10.244.1.3:999"), acc: netip.MustParseAddrPort("10.244.1.9:1")})
	r.mu.Unlock()
	port := uint16(1000)
	connect := func(by string) *meeting {
		port++
		k := tuple{conn: netip.AddrPortFrom(netip.MustParseAddr("10.244.1.5"), port), acc: lisEP}
		m, role := r.join(k, sideConnector, &listenerInfo{key: lis, pids: []int32{42}, conn: by}, nil, asking{})
		if role != roleFirst {
			t.Fatalf("connect %v: role %v", k, role)
		}
		return m
	}
	var hog []*meeting
	for range maxParkedPerContainer {
		if m := connect("hog"); m.park {
			hog = append(hog, m)
		}
	}
	if len(hog) != maxParkedPerContainer {
		t.Fatalf("%d of %d connects parked", len(hog), maxParkedPerContainer)
	}
	if connect("hog").park {
		t.Fatal("a container at its share of parked halves got one more")
	}
	if !connect("web").park {
		t.Fatal("another container's connect was not parked while one container is at its share")
	}
	for i, m := range hog[:2] { // the connector completes both; the first half is claimed, the second expires
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		r.decide(m, decision{kind: pathUnix}, [2]int{fds[0], fds[1]})
		closeFD(r.takeHalfNow(m, sideConnector))
		if i == 0 {
			closeFD(r.takeHalfNow(m, sideAcceptor))
		}
	}
	awaitHolding(t, r.parked, "hog", maxParkedPerContainer-2)
	if !connect("hog").park {
		t.Fatal("a claimed and an expired half gave no place back")
	}
}

// takeHalfNow takes side s's half of a decided meeting and returns its
// socket.
func (r *rendezvous) takeHalfNow(m *meeting, s side) int {
	_, h := r.takeHalf(m, s)
	return h.fd
}

// Listener registrations are bounded per container: one more than its
// limit is refused LIMIT while another container still registers; a
// registration repeated is no new one; and registrations of processes
// that are gone are swept to make room.
func TestListenersBoundedPerContainer(t *testing.T) {
	self, err := nsOfPid(int32(os.Getpid()))
	if err != nil {
		t.Fatal(err)
	}
	live := &session{pid: int32(os.Getpid()), ns: self}
	gone := &session{pid: exitedPid(t), ns: self}
	l := newListeners()
	for port := range maxListensPerContainer {
		if err := l.add(live, "hog", uint16(port+1)); err != nil {
			t.Fatalf("registration %d: %v", port+1, err)
		}
	}
	wantCode(t, l.add(live, "hog", 60000), protocol.CodeLimit)
	if err := l.add(live, "hog", 1); err != nil {
		t.Errorf("a registration repeated at the limit: %v", err)
	}
	if err := l.add(live, "web", 80); err != nil {
		t.Errorf("another container's registration while one is at its limit: %v", err)
	}

	l = newListeners()
	for port := range maxListensPerContainer {
		if err := l.add(gone, "hog", uint16(port+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.add(live, "hog", 60000); err != nil {
		t.Errorf("registrations of a process that is gone made no room: %v", err)
	}
}

// exitedPid returns the pid of a process that has exited and been reaped.
func exitedPid(t *testing.T) int32 {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return int32(cmd.Process.Pid)
}

// Ledgers are bounded per container: a process beyond its container's
// limit is refused LIMIT (its mapping undone), a process of another
// container is not, and a process that sends its ledger again is no new
// one.
func TestLedgersBoundedPerContainer(t *testing.T) {
	s := newLedgers()
	defer s.close()
	s.limit = 2
	hog, web := directory.Container{ID: "hog"}, directory.Container{ID: "web"}
	live := []int32{int32(os.Getpid()), 1, int32(os.Getppid())} // alive while the test runs
	for _, pid := range live[:2] {                              // a ledger each: one memfd held by two processes is listed once
		if err := s.add(pid, hog, newTestLedger(t, 4).fd); err != nil {
			t.Fatalf("ledger of process %d: %v", pid, err)
		}
	}
	wantCode(t, s.add(live[2], hog, newTestLedger(t, 4).fd), protocol.CodeLimit)
	if err := s.add(live[0], hog, newTestLedger(t, 4).fd); err != nil {
		t.Errorf("a process at the limit replacing its own ledger: %v", err)
	}
	if err := s.add(live[2], web, newTestLedger(t, 4).fd); err != nil {
		t.Errorf("another container's ledger while one is at its limit: %v", err)
	}
	if got := len(s.m); got != 3 {
		t.Errorf("%d ledgers mapped, want 3", got)
	}
}

// The table of answered connections is bounded per container: a container
// that asks beyond its share pushes out its own entries, never another
// container's.
func TestConnEntriesBoundedPerContainer(t *testing.T) {
	tab := newConnTable()
	pid := int32(os.Getpid())
	ep := func(ip string, port int) netip.AddrPort {
		return netip.AddrPortFrom(netip.MustParseAddr(ip), uint16(port))
	}
	for i := range 10 {
		tab.add("web", pid, ep("10.244.1.3", 40000+i), ep("10.244.1.4", 80), agentapi.ConnInfo{LocalContainer: "web", Path: "shm"}, nil)
	}
	for i := range maxConnEntriesPerContainer + 100 {
		tab.add("hog", pid, ep("10.244.1.2", 1+i%60000), ep("10.244.1.250", 1+i/60000), agentapi.ConnInfo{LocalContainer: "hog", Path: "overlay"}, nil)
	}
	web := 0
	for _, c := range tab.list() {
		if c.LocalContainer == "web" {
			web++
		}
	}
	if web != 10 || tab.held["hog"] != maxConnEntriesPerContainer || len(tab.m) != maxConnEntriesPerContainer+10 {
		t.Errorf("after the hog's %d asks: web lists %d of 10, hog holds %d (limit %d), %d entries in all",
			maxConnEntriesPerContainer+100, web, tab.held["hog"], maxConnEntriesPerContainer, len(tab.m))
	}
}

// LINK_FILLs in flight are bounded per container: at its limit a fill is
// answered UNAVAILABLE (the library connects through the agent), and
// once one ends the next is served.
func TestLinkFillsInFlightBoundedPerContainer(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49070)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	for range fillsPerContainer { // as if its other sessions were filling now
		hs.h1.fills.take(ffSelf.ID)
	}
	_, err := cli.fill(con.XLink, 1)
	wantCode(t, err, protocol.CodeUnavailable)
	hs.h1.fills.release(ffSelf.ID)
	fds, err := cli.fill(con.XLink, 1)
	if err != nil || len(fds) != 1 {
		t.Fatalf("LINK_FILL once a fill ended: %d connections, %v; want 1", len(fds), err)
	}
	protocol.CloseFDs(fds)
}

// The verbs registry's descriptors are in the file limit: every container
// of a /24 at its full share, its verbs memfds included, fits the kernel's
// default fs.nr_open, so the agent raises its limit that far and no
// container's session share shrinks for them.
func TestVerbsFDsFitDefaultNrOpen(t *testing.T) {
	const defaultNrOpen = 1 << 20
	full := fileLimit(netip.MustParsePrefix(testSubnet), shares{DefaultSessionsPerContainer, DefaultVerbsFDs}, DefaultAdminConns)
	if full > defaultNrOpen {
		t.Fatalf("fileLimit for a /24: %d, more than the default fs.nr_open %d", full, defaultNrOpen)
	}
}
