package agent

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

const (
	testHost   = "h1"
	testSubnet = "10.244.1.0/24"
)

// selfContainer is registered in the fake directory with the test
// process's own namespace, so in-process clients of the library socket are
// identified as it (the agent finds it when it rebuilds its map on start).
var selfContainer = directory.Container{
	ID: "self0", Name: "self", Host: testHost, IP: "10.244.1.9", Tenant: "blue", NetNS: "/proc/self/ns/net",
}

// remoteContainer lives on another host.
var remoteContainer = directory.Container{
	ID: "remote0", Name: "db", Host: "h2", IP: "10.244.2.5", Tenant: "blue", FreeFlow: true,
}

type testAgent struct {
	*Agent
	dir  *fakeDir
	stop func() // stops the agent (also done when the test ends)
}

// startAgent runs an agent on temporary sockets until the test ends.
func startAgent(t testing.TB, dir *fakeDir, mod func(*Config)) *testAgent {
	t.Helper()
	tmp := t.TempDir()
	cfg := Config{
		Cluster: "t" + randName(4), Host: testHost, FabricIP: "10.99.0.2", Subnet: testSubnet,
		SockDir: filepath.Join(tmp, "sock"), AdminSocket: filepath.Join(tmp, "admin.sock"),
		HelloTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, WriteTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if os.Getenv("FF_AGENT_TEST_LOG") != "" {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if mod != nil {
		mod(&cfg)
	}
	a, err := New(cfg, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Serve(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("agent: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return &testAgent{Agent: a, dir: dir, stop: stop}
}

func randName(n int) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = letters[int(b[i])%len(letters)]
	}
	return string(b)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// dialRaw opens a protocol connection for sending arbitrary bytes.
func dialRaw(t testing.TB, path string) *protocol.Conn {
	t.Helper()
	c, err := protocol.Dial(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return c
}

func sendBytes(t testing.TB, c *protocol.Conn, b []byte) {
	t.Helper()
	if _, err := c.Unix().Write(b); err != nil {
		t.Fatalf("send %d bytes: %v", len(b), err)
	}
}

func encode(t testing.TB, m *protocol.Message) []byte {
	t.Helper()
	b, err := protocol.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// header builds a raw header, for messages Encode refuses to make.
func header(version, typ byte, seq, length uint32) []byte {
	b := []byte{0x46, 0x46, version, typ}
	b = binary.LittleEndian.AppendUint32(b, seq)
	return binary.LittleEndian.AppendUint32(b, length)
}

// wantError reads one reply and checks it is ERROR with code and seq.
func wantError(t testing.TB, c *protocol.Conn, code protocol.Code, seq uint32) {
	t.Helper()
	m, _, err := c.ReadMsg()
	if err != nil {
		t.Fatalf("want ERROR %v, read failed: %v", code, err)
	}
	e := m.Err()
	if e == nil || e.Code != code || m.Seq != seq {
		t.Fatalf("want ERROR %v seq %d, got %v seq %d (%v)", code, seq, m.Type, m.Seq, e)
	}
}

// wantClosed checks the agent closed the connection.
func wantClosed(t testing.TB, c *protocol.Conn) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	m, _, err := c.ReadMsg()
	if !errors.Is(err, io.EOF) {
		t.Fatalf("want the connection closed, got %v, %v", m, err)
	}
}

// meet has srv ACCEPT and cli CONNECT the connection from local to lis,
// both at once, and returns the two answers.
func meet(t testing.TB, srv, cli *libClient, local, lis string) (con, acc pathResult) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var err error
		acc, err = srv.accept(lis, local)
		done <- err
	}()
	con, err := cli.connect(local, lis)
	if aerr := <-done; err != nil || aerr != nil {
		t.Fatalf("connect: %v; accept: %v", err, aerr)
	}
	return con, acc
}

// fastPathListed has a new session listening on selfSrv accept and a new
// one (returned) connect from selfCli(port), checks both got the same-host
// fast path (unix), and closes the two descriptors, which the agent does
// not see: it still lists both ends. Both sessions last until the test ends.
func fastPathListed(t testing.TB, a *testAgent, port int) *libClient {
	t.Helper()
	srv, cli := newLib(t, a), newLib(t, a)
	srv.listen(selfSrv)
	done := make(chan pathResult)
	go func() { r, _ := srv.accept(selfSrv, selfCli(port)); done <- r }()
	con, err := cli.connect(selfCli(port), selfSrv)
	acc := <-done
	if err != nil || con.Kind != pathUnix || acc.Kind != pathUnix {
		t.Fatalf("fast path: %+v %+v %v", con, acc, err)
	}
	closeFD(con.FD)
	closeFD(acc.FD)
	return cli
}

// wantCode checks err carries the agent's code.
func wantCode(t testing.TB, err error, code protocol.Code) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got %v, want an agent error with code %v", err, code)
	}
}

func needRoot(t testing.TB, bins ...string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates network namespaces")
	}
	for _, b := range bins {
		if _, err := exec.LookPath(b); err != nil {
			t.Skipf("needs %s on the PATH: %v", b, err)
		}
	}
}

// makeNetns creates a named network namespace, removed when the test ends.
func makeNetns(t testing.TB) string {
	t.Helper()
	needRoot(t, "ip")
	name := "fft" + randName(6)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", name).CombinedOutput(); err != nil {
			t.Errorf("ip netns del %s: %v: %s", name, err, out)
		}
	})
	return name
}
