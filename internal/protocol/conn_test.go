package protocol

import (
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// pair returns two connected SOCK_SEQPACKET ends, closed at cleanup.
func pair(t *testing.T) (*Conn, *os.File) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fds[0]), "a")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	c := NewConn(fc.(*net.UnixConn))
	raw := os.NewFile(uintptr(fds[1]), "b")
	t.Cleanup(func() { c.Close(); raw.Close() })
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	return c, raw
}

// pipe returns both ends of a pipe, closed when the test ends.
func pipe(t *testing.T) (r, w *os.File) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })
	return r, w
}

func sendRaw(t *testing.T, raw *os.File, b []byte, fds ...int) {
	t.Helper()
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	if err := syscall.Sendmsg(int(raw.Fd()), b, oob, nil, 0); err != nil {
		t.Fatalf("sendmsg: %v", err)
	}
}

func TestConnPassesFDs(t *testing.T) {
	c, raw := pair(t)
	r, w := pipe(t)
	peer, err := net.FileConn(raw)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if err := NewConn(peer.(*net.UnixConn)).WriteMsg(New(TypeOK, 3), int(w.Fd())); err != nil {
		t.Fatal(err)
	}
	m, fds, err := c.ReadMsg()
	if err != nil || m.Type != TypeOK || m.Seq != 3 || len(fds) != 1 {
		t.Fatalf("ReadMsg = %v, %v, %v", m, fds, err)
	}
	got := os.NewFile(uintptr(fds[0]), "passed")
	defer got.Close()
	got.WriteString("hi")
	buf := make([]byte, 2)
	if _, err := io.ReadFull(r, buf); err != nil || string(buf) != "hi" {
		t.Fatalf("the passed descriptor is not the pipe: %q, %v", buf, err)
	}
}

func TestConnRejectsOversized(t *testing.T) {
	c, raw := pair(t)
	if err := syscall.SetsockoptInt(int(raw.Fd()), syscall.SOL_SOCKET, syscall.SO_SNDBUF, 1<<20); err != nil {
		t.Fatal(err)
	}
	b, _ := Encode(New(TypeList, 1))
	sendRaw(t, raw, append(b, make([]byte, MaxMessage)...))
	_, _, err := c.ReadMsg()
	wantCode(t, err, CodeBadMsg)
	sendRaw(t, raw, b) // the connection still reads the next message
	if m, _, err := c.ReadMsg(); err != nil || m.Type != TypeList {
		t.Fatalf("after an oversized message: %v, %v", m, err)
	}
}

func TestConnRejectsTooManyFDs(t *testing.T) {
	c, raw := pair(t)
	r, w := pipe(t)
	fds := make([]int, MaxFDs+4)
	for i := range fds {
		fds[i] = int(w.Fd())
	}
	b, _ := Encode(New(TypeList, 1))
	sendRaw(t, raw, b, fds...)
	w.Close()
	_, _, err := c.ReadMsg()
	wantCode(t, err, CodeBadMsg)
	// Every copy of the write end is closed again, so the pipe reads EOF.
	r.SetReadDeadline(time.Now().Add(2 * time.Second))
	if n, err := r.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("pipe read = %d, %v; a received descriptor leaked", n, err)
	}
}

func TestConnDecodeErrorAndEOF(t *testing.T) {
	c, raw := pair(t)
	sendRaw(t, raw, []byte{0x46, 0x46, 2, 1, 0, 0, 0, 0, 0, 0, 0, 0})
	_, _, err := c.ReadMsg()
	wantCode(t, err, CodeVersion)
	raw.Close()
	if _, _, err := c.ReadMsg(); err != io.EOF {
		t.Fatalf("after the peer closed: %v, want io.EOF", err)
	}
}
