package packethold

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/netns"
)

// pair makes two namespaces joined by a veth: a (10.250.0.1, "ha") and b
// (10.250.0.2, "hb"), removed when the test ends.
func pair(t *testing.T) (a, b string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	for _, p := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(p); err != nil {
			t.Skip("needs " + p)
		}
	}
	r := make([]byte, 3)
	rand.Read(r)
	a, b = fmt.Sprintf("tholda%x", r), fmt.Sprintf("tholdb%x", r)
	for _, ns := range []string{a, b} {
		if err := netns.Create(ns); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { netns.Delete(ns) })
	}
	for _, args := range [][]string{
		{"-n", a, "link", "add", "ha", "type", "veth", "peer", "name", "hb", "netns", b},
		{"-n", a, "addr", "add", "10.250.0.1/24", "dev", "ha"},
		{"-n", b, "addr", "add", "10.250.0.2/24", "dev", "hb"},
		{"-n", a, "link", "set", "ha", "up"},
		{"-n", b, "link", "set", "hb", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v: %s", args, err, out)
		}
	}
	return a, b
}

// TestHeldPacketsReachTheSocketsMadeMeanwhile: a connection whose SYN
// arrives before anything listens, held, completes once the listener is
// there and the hold is released (not reset), and its bytes arrive.
func TestHeldPacketsReachTheSocketsMadeMeanwhile(t *testing.T) {
	a, b := pair(t)
	h, err := Start(a, "ha")
	if err != nil {
		t.Fatal(err)
	}
	dialed := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := netns.Dial(ctx, netns.Path(b), "tcp", "10.250.0.1:7070")
		if err == nil {
			_, err = c.Write([]byte("held"))
			c.Close()
		}
		dialed <- err
	}()
	time.Sleep(300 * time.Millisecond) // the SYN is held, with no listener yet
	select {
	case err := <-dialed:
		t.Fatalf("the connect ended while its SYN was to be held: %v", err)
	default:
	}
	l, err := netns.Listen(netns.Path(a), "tcp", "10.250.0.1:7070")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	n, err := h.Release()
	if err != nil || n == 0 {
		t.Fatalf("Release: %d packets held, %v", n, err)
	}
	if err := h.Close(); err != nil { // what the namespace answers is held too, until Close
		t.Fatal(err)
	}
	if err := <-dialed; err != nil {
		t.Fatalf("the held connect failed after the release: %v", err)
	}
	l.(*net.TCPListener).SetDeadline(time.Now().Add(3 * time.Second))
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(c)
	if string(got) != "held" {
		t.Fatalf("read %q, want %q", got, "held")
	}
}

// TestDroppedHoldLetsNothingThrough: after Drop no held packet reaches
// the namespace (a SYN held then dropped is retransmitted by the client
// only after its timeout, so a listener made meanwhile sees nothing at
// once), and the rule is gone: a new connection gets through.
// TestHeldOutputNeverLeaves: what the namespace sends while held (the
// last words of a restored copy that is killed) is dropped with Drop, not
// sent; once released, what it sends leaves at once.
func TestHeldOutputNeverLeaves(t *testing.T) {
	a, b := pair(t)
	var pc net.PacketConn
	if err := netns.Do(netns.Path(b), func() (err error) { pc, err = net.ListenPacket("udp", "10.250.0.2:7073"); return }); err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	send := func(what string) {
		t.Helper()
		if err := netns.Do(netns.Path(a), func() error {
			c, err := net.Dial("udp", "10.250.0.2:7073")
			if err == nil {
				_, err = c.Write([]byte(what))
				c.Close()
			}
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	got := func() string {
		buf := make([]byte, 64)
		pc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		n, _, err := pc.ReadFrom(buf)
		if err != nil {
			return ""
		}
		return string(buf[:n])
	}
	h, err := Start(a, "ha")
	if err != nil {
		t.Fatal(err)
	}
	send("last words")
	if _, err := h.Drop(); err != nil {
		t.Fatal(err)
	}
	if g := got(); g != "" {
		t.Fatalf("%q left the namespace while held", g)
	}
	if h, err = Start(a, "ha"); err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if _, err := h.Release(); err != nil {
		t.Fatal(err)
	}
	send("after")
	if g := got(); g != "after" {
		t.Fatalf("after Release the namespace's datagram did not leave at once: got %q", g)
	}
}

func TestDroppedHoldLetsNothingThrough(t *testing.T) {
	a, b := pair(t)
	h, err := Start(a, "ha")
	if err != nil {
		t.Fatal(err)
	}
	l, err := netns.Listen(netns.Path(a), "tcp", "10.250.0.1:7071")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := netns.Dial(ctx, netns.Path(b), "tcp", "10.250.0.1:7071"); err == nil {
		c.Close()
		t.Fatal("a connection got through while the input was held")
	}
	if _, err := h.Drop(); err != nil {
		t.Fatal(err)
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel2()
	c, err := netns.Dial(ctx2, netns.Path(b), "tcp", "10.250.0.1:7071")
	if err != nil {
		t.Fatalf("after Drop the rule is still there: %v", err)
	}
	c.Close()
}
