package agent

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

func TestHelloAndLookup(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer, remoteContainer), nil)
	c, err := agentapi.Dial(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	id, err := c.Hello(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	want := selfContainer
	want.NetNS = ""
	if id != want {
		t.Fatalf("HELLO identity = %+v, want %+v", id, want)
	}
	p, found, err := c.Lookup(ctxT(t), netip.MustParseAddr(remoteContainer.IP))
	if err != nil || !found {
		t.Fatalf("lookup of a remote container: %v, %v", found, err)
	}
	if p.Name != "db" || p.Host != "h2" || p.Tenant != "blue" || p.Local || !p.FreeFlow || p.IP.String() != remoteContainer.IP {
		t.Errorf("lookup of a remote container = %+v", p)
	}
	p, found, err = c.Lookup(ctxT(t), netip.MustParseAddr(selfContainer.IP))
	if err != nil || !found || !p.Local || p.FreeFlow {
		t.Errorf("lookup of a local container = %+v, %v, %v", p, found, err)
	}
	if _, found, err = c.Lookup(ctxT(t), netip.MustParseAddr("10.1.2.3")); err != nil || found {
		t.Errorf("lookup of an unknown IP = %v, %v; want not found", found, err)
	}
}

func TestHostRegisteredOnStart(t *testing.T) {
	a := startAgent(t, newFakeDir(), nil)
	c, err := agentapi.DialAdmin(a.cfg.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Status(ctxT(t)) // one round trip, so Serve has run long enough
	for i := 0; i < 100; i++ {
		if h, ok := a.dir.host(testHost); ok {
			if h.FabricIP != "10.99.0.2" || h.Subnet != testSubnet {
				t.Fatalf("host record = %+v", h)
			}
			return
		}
		sleepMS(20)
	}
	t.Fatal("the agent did not register its host in the directory")
}

// Each malformed or out-of-order message gets the documented reply, and
// the connection is closed exactly when PROTOCOL.md says so.
func TestMalformedMessages(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	hello := encode(t, protocol.New(protocol.TypeHello, 1))
	lookupNoIP := encode(t, protocol.New(protocol.TypeLookup, 6))
	cases := []struct {
		name       string
		afterHello bool
		msg        []byte
		code       protocol.Code
		seq        uint32
		closes     bool
	}{
		{"truncated header", false, hello[:7], protocol.CodeBadMsg, 0, true},
		{"truncated attribute", true, append(header(1, 3, 5, 2), 3, 0), protocol.CodeBadMsg, 5, true},
		{"length disagrees", true, header(1, 0x42, 5, 4), protocol.CodeBadMsg, 5, true},
		{"bad magic", false, append([]byte{0x47}, hello[1:]...), protocol.CodeBadMsg, 1, true},
		{"version 2", false, header(2, 1, 3, 0), protocol.CodeVersion, 3, true},
		{"oversized", true, append(header(1, 0x42, 4, protocol.MaxMessage), make([]byte, protocol.MaxMessage)...), protocol.CodeBadMsg, 0, true},
		{"request before HELLO", false, encode(t, protocol.New(protocol.TypeList, 2)), protocol.CodeSequence, 2, true},
		{"second HELLO", true, hello, protocol.CodeSequence, 1, true},
		{"unknown type", true, header(1, 0x2b, 7, 0), protocol.CodeUnknown, 7, false},
		{"reply type as request", true, encode(t, protocol.New(protocol.TypeOK, 8)), protocol.CodeUnknown, 8, false},
		{"LOOKUP without IP", true, lookupNoIP, protocol.CodeInvalid, 6, false},
		{"admin request on library socket", true, encode(t, protocol.New(protocol.TypeStatus, 9)), protocol.CodeDenied, 9, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dialRaw(t, a.cfg.LibrarySocket())
			if tc.afterHello {
				sendBytes(t, c, hello)
				if m, _, err := c.ReadMsg(); err != nil || m.Type != protocol.TypeHelloReply {
					t.Fatalf("HELLO: %v, %v", m, err)
				}
			}
			sendBytes(t, c, tc.msg)
			wantError(t, c, tc.code, tc.seq)
			if tc.closes {
				wantClosed(t, c)
				return
			}
			// The connection stays usable.
			sendBytes(t, c, encode(t, protocol.New(protocol.TypeLookup, 99, protocol.IP(netip.MustParseAddr(selfContainer.IP)))))
			if m, _, err := c.ReadMsg(); err != nil || m.Type != protocol.TypeLookupReply || m.Seq != 99 {
				t.Fatalf("LOOKUP after %s: %v, %v", tc.name, m, err)
			}
		})
	}
}

func TestLibraryCallerNotRegisteredDenied(t *testing.T) {
	a := startAgent(t, newFakeDir(remoteContainer), nil)
	c, err := agentapi.Dial(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Hello(ctxT(t))
	wantCode(t, err, protocol.CodeDenied)
	if !bytes.Contains([]byte(err.Error()), []byte("not in a registered container of host h1")) {
		t.Errorf("DENIED message %q does not say why", err)
	}
}

func TestSilentClientDisconnected(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), func(c *Config) { c.HelloTimeout = 200 * time.Millisecond })
	c := dialRaw(t, a.cfg.LibrarySocket())
	wantClosed(t, c) // never sent HELLO
}

func TestHandlerPanicClosesOnlyThatConnection(t *testing.T) {
	dir := newFakeDir(selfContainer)
	dir.panicIP = "10.9.9.9"
	a := startAgent(t, dir, nil)
	bad, err := agentapi.Dial(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	defer bad.Close()
	if _, err := bad.Hello(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := bad.Lookup(ctxT(t), netip.MustParseAddr("10.9.9.9")); err == nil {
		t.Fatal("a lookup whose handler panicked got an answer")
	}
	checkGoodClient(t, a)
}

// Brokering requests are checked like any other: a missing attribute is
// INVALID, a reply type is not a request, and the admin socket refuses
// them.
func TestBrokeringRequestsChecked(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	c := dialRaw(t, a.cfg.LibrarySocket())
	local := protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort("10.244.1.9:40000"))
	steps := []struct {
		m    *protocol.Message
		want protocol.Type
	}{
		{protocol.New(protocol.TypeHello, 1), protocol.TypeHelloReply},
		{protocol.New(protocol.TypeListen, 2, local), protocol.TypeOK},
		{protocol.New(protocol.TypeUnlisten, 6, local), protocol.TypeOK},
		{protocol.New(protocol.TypeConnect, 7, local), protocol.TypeError},
		{protocol.New(protocol.TypePath, 8, protocol.U8(protocol.AttrPathKind, 1)), protocol.TypeError},
		{protocol.New(protocol.TypeOffer, 9, local), protocol.TypeError},
		{protocol.New(protocol.TypeConns, 10), protocol.TypeError},
	}
	for _, st := range steps {
		if err := c.WriteMsg(st.m); err != nil {
			t.Fatal(err)
		}
		r, fds, err := c.ReadMsg()
		if err != nil || r.Type != st.want || r.Seq != st.m.Seq || len(fds) != 0 {
			t.Fatalf("%v: reply %v, %v fds, %v; want %v", st.m.Type, r, fds, err, st.want)
		}
	}
	// On the admin socket (an agent where this process is no container).
	b := startAgent(t, newFakeDir(), nil)
	admin, err := agentapi.Dial(b.cfg.AdminSocket)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close()
	if _, err := admin.Hello(ctxT(t)); err != nil {
		t.Skipf("admin socket unusable here (not root?): %v", err)
	}
	_, err = admin.Call(ctxT(t), protocol.New(protocol.TypeListen, 0, local), protocol.TypeOK)
	wantCode(t, err, protocol.CodeDenied)
}
