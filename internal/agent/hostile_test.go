package agent

import (
	"math/rand"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

func sleepMS(n int) { time.Sleep(time.Duration(n) * time.Millisecond) }

// checkGoodClient runs HELLO and LOOKUP on a fresh library connection and
// fails if they do not complete promptly.
func checkGoodClient(t testing.TB, a *testAgent) time.Duration {
	t.Helper()
	start := time.Now()
	c, err := agentapi.Dial(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if id, err := c.Hello(ctxT(t)); err != nil || id.ID != selfContainer.ID {
		t.Fatalf("good client HELLO: %+v, %v", id, err)
	}
	if _, found, err := c.Lookup(ctxT(t), netip.MustParseAddr(selfContainer.IP)); err != nil || !found {
		t.Fatalf("good client LOOKUP: %v, %v", found, err)
	}
	d := time.Since(start)
	if d > time.Second {
		t.Fatalf("good client needed %v for HELLO+LOOKUP", d)
	}
	return d
}

// While clients stall (connected, silent), spam requests without reading
// replies, and send garbage in a loop, another client's HELLO+LOOKUP still
// completes promptly, and the client that does not read is disconnected.
func TestHostileClientDoesNotAffectOthers(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), func(c *Config) { c.IdleTimeout = 5 * time.Second })
	for i := 0; i < 20; i++ {
		dialRaw(t, a.cfg.LibrarySocket()) // stalled: never sends
	}
	spammer := dialRaw(t, a.cfg.LibrarySocket())
	sendBytes(t, spammer, encode(t, protocol.New(protocol.TypeHello, 1)))
	stop := make(chan struct{})
	var wg sync.WaitGroup
	spamDone := make(chan error, 1)
	wg.Add(2)
	go func() { defer wg.Done(); spamDone <- spamWithoutReading(spammer, stop) }()
	go func() { defer wg.Done(); sendGarbage(t, a, stop) }()
	var worst time.Duration
	for i := 0; i < 20; i++ {
		worst = max(worst, checkGoodClient(t, a))
		sleepMS(25)
	}
	close(stop)
	wg.Wait()
	t.Logf("slowest HELLO+LOOKUP under attack: %v", worst)
	if err := <-spamDone; err == nil {
		t.Error("a client that never reads its replies was not disconnected")
	}
}

// spamWithoutReading sends LOOKUPs and never reads; it returns the error
// that ended it (the agent closing the connection), or nil if stopped.
func spamWithoutReading(c *protocol.Conn, stop chan struct{}) error {
	m := protocol.New(protocol.TypeLookup, 2, protocol.IP(netip.MustParseAddr("10.244.1.9")))
	for {
		select {
		case <-stop:
			return nil
		default:
		}
		c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		err := c.WriteMsg(m)
		if err != nil && !isTimeout(err) {
			return err
		}
	}
}

func isTimeout(err error) bool {
	te, ok := err.(interface{ Timeout() bool })
	return ok && te.Timeout()
}

// sendGarbage keeps opening connections and sending random datagrams.
func sendGarbage(t testing.TB, a *testAgent, stop chan struct{}) {
	rng := rand.New(rand.NewSource(1))
	for {
		select {
		case <-stop:
			return
		default:
		}
		c, err := protocol.Dial(a.cfg.LibrarySocket())
		if err != nil {
			t.Errorf("garbage client cannot connect: %v", err)
			return
		}
		for i := 0; i < 10; i++ {
			c.Unix().Write(randomDatagram(rng))
		}
		c.Close()
	}
}

// randomDatagram is either random bytes or a valid message with a few
// bytes flipped, so that some datagrams get past the header checks.
func randomDatagram(rng *rand.Rand) []byte {
	var b []byte
	if rng.Intn(2) == 0 {
		b = make([]byte, rng.Intn(64))
		rng.Read(b)
		return b
	}
	m := protocol.New(protocol.Type([]byte{1, 3, 0x40, 0x41, 0x42, 0x43}[rng.Intn(6)]), rng.Uint32(),
		protocol.IP(netip.MustParseAddr("10.244.1.9")), protocol.String(protocol.AttrContainerID, "self0"))
	b, _ = protocol.Encode(m)
	for i := rng.Intn(4); i > 0; i-- {
		b[rng.Intn(len(b))] = byte(rng.Intn(256))
	}
	return b
}

// TestRandomDatagrams sends many random datagrams, each after a valid
// HELLO, reads whatever comes back, and checks the agent still serves.
func TestRandomDatagrams(t *testing.T) {
	a := startAgent(t, newFakeDir(selfContainer), nil)
	rng := rand.New(rand.NewSource(2))
	for i := 0; i < 300; i++ {
		driveDatagram(t, a, true, randomDatagram(rng))
	}
	checkGoodClient(t, a)
}

// driveDatagram sends one datagram (after HELLO if hello) and reads until
// the reply; a reply must be ERROR or a well-formed answer with the seq. A
// datagram whose header says CLOSED or LEDGER gets no reply at all.
func driveDatagram(t testing.TB, a *testAgent, hello bool, data []byte) {
	c, err := protocol.Dial(a.cfg.LibrarySocket())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(2 * time.Second))
	if hello {
		c.WriteMsg(protocol.New(protocol.TypeHello, 1))
		if m, _, err := c.ReadMsg(); err != nil || m.Type != protocol.TypeHelloReply {
			t.Fatalf("HELLO: %v, %v", m, err)
		}
	}
	if len(data) == 0 {
		return
	}
	if _, err := c.Unix().Write(data); err != nil {
		return
	}
	notification := len(data) >= protocol.HeaderSize && isNotification(protocol.Type(data[3]))
	if notification { // never answered: the next reply must be the next request's
		c.WriteMsg(protocol.New(protocol.TypeLookup, 99, protocol.IP(netip.MustParseAddr(selfContainer.IP))))
	}
	m, _, err := c.ReadMsg()
	if err != nil {
		if isTimeout(err) {
			t.Fatalf("no reply to %x within 2 s", data)
		}
		return
	}
	if notification && m.Seq != 99 {
		t.Fatalf("%x, a notification, was answered with %v seq %d", data, m.Type, m.Seq)
	}
	if e := m.Err(); e != nil && e.Code.Closes() {
		if _, _, err := c.ReadMsg(); err == nil {
			t.Fatalf("agent kept the connection open after %v", e)
		}
	}
}

// FuzzAgent drives fuzzed datagrams into a live agent and checks that a
// well-behaved client is still served afterwards.
func FuzzAgent(f *testing.F) {
	a := startAgent(f, newFakeDir(selfContainer), nil)
	f.Add(true, []byte{0x46, 0x46, 1, 3, 1, 0, 0, 0, 8, 0, 0, 0, 3, 0, 4, 0, 10, 244, 1, 9})
	f.Add(false, []byte{0x46, 0x46, 1, 0x42, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add(true, []byte{0x46, 0x46, 2, 1, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Add(true, []byte{0x46, 0x46, 1, 0x41, 1, 0, 0, 0, 9, 0, 0, 0, 7, 0, 5, 0, 's', 'e', 'l', 'f', '0'})
	f.Add(false, []byte{0x46})
	f.Add(true, []byte{0x46, 0x46, 1, 0x15, 1, 0, 0, 0, 20, 0, 0, 0, 14, 0, 6, 0, 10, 244, 1, 9, 0x9c, 0x40, 15, 0, 6, 0, 10, 244, 1, 2, 0x1f, 0x90})
	f.Add(true, []byte{0x46, 0x46, 1, 0x18, 1, 0, 0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, hello bool, data []byte) {
		driveDatagram(t, a, hello, data)
		checkGoodClient(t, a)
	})
}
