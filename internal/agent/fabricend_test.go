package agent

import (
	"testing"

	"golang.org/x/sys/unix"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// Every fabric socket the agents hand ends without TIME_WAIT once closed
// (fabricend.go): TCP_LINGER2 -1 on host-tcp connections, both ends.
func TestFabricSocketsEndOnceAcked(t *testing.T) {
	hs := startTwoHosts(t, nil)
	if err := newLib(t, hs.h2).listen(srv2); err != nil {
		t.Fatal(err)
	}
	withHostTCP(t, hs, 43700, func(con, acc pathResult) {
		wantLinger2(t, "connector's host-tcp connection", con.FD)
		wantLinger2(t, "acceptor's host-tcp connection", acc.FD)
	})
}

// The same for a link listener and the stock dialed to it, both ends of
// each.
func TestXLinkSocketsEndOnceAcked(t *testing.T) {
	hs := startTwoHosts(t, nil)
	cli, con, acc := grantedXLink(t, hs, 49700)
	t.Cleanup(func() { closeResult(con); closeResult(acc) })
	wantLinger2(t, "link listener", acc.Link)
	fds, err := cli.fill(con.XLink, 1)
	if err != nil || len(fds) != 1 {
		t.Fatalf("LINK_FILL: %d connections, %v; want 1", len(fds), err)
	}
	t.Cleanup(func() { protocol.CloseFDs(fds) })
	wantLinger2(t, "stock connection", fds[0])
	unix.SetsockoptTimeval(acc.Link, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5})
	nfd, _, err := unix.Accept4(acc.Link, unix.SOCK_CLOEXEC)
	if err != nil {
		t.Fatalf("accept on the link listener: %v", err)
	}
	defer unix.Close(nfd)
	wantLinger2(t, "stock connection accepted on the link listener", nfd)
}

func wantLinger2(t *testing.T, what string, fd int) {
	t.Helper()
	if v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_LINGER2); err != nil || v != -1 {
		t.Errorf("%s: TCP_LINGER2 %d (%v), want -1: it would wait in TIME_WAIT once closed", what, v, err)
	}
}
