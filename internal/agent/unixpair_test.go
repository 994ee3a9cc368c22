package agent

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnixChannelHoldsWhatTCPHolds: each end of a unix channel takes, with
// its peer reading nothing, about what TCP between two containers can hold
// unread one way (tcp_wmem max + tcp_rmem max), not the kernel's default
// 208 KiB, on which a whole-message-before-reading program blocks forever.
func TestUnixChannelHoldsWhatTCPHolds(t *testing.T) {
	w, errW := sysctlMax("/proc/sys/net/ipv4/tcp_wmem")
	r, errR := sysctlMax("/proc/sys/net/ipv4/tcp_rmem")
	if errW != nil || errR != nil {
		t.Fatalf("read the TCP buffer sysctls: %v, %v", errW, errR)
	}
	a := startAgent(t, newFakeDir(ffSelf), nil)
	srv, cli := newLib(t, a), newLib(t, a)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meet(t, srv, cli, selfCli(40100), selfSrv)
	defer closeFD(con.FD)
	defer closeFD(acc.FD)
	if con.Kind != pathUnix || acc.Kind != pathUnix {
		t.Fatalf("paths: connect %+v, accept %+v; want unix for both", con, acc)
	}
	// Per skb the kernel counts some overhead too: 64 KiB writes lose ~2%.
	want := (w + r) / 8 * 7
	for _, fd := range []int{con.FD, acc.FD} {
		if got := fillUnread(t, fd); got < want {
			t.Errorf("an end holds %d bytes unread, want at least %d (tcp_wmem max %d + tcp_rmem max %d, less 1/8)",
				got, want, w, r)
		}
	}
}

// fillUnread writes into fd, non-blocking, until it would block: how many bytes.
func fillUnread(t *testing.T, fd int) int {
	t.Helper()
	if err := unix.SetNonblock(fd, true); err != nil {
		t.Fatal(err)
	}
	buf, n := make([]byte, 64<<10), 0
	for {
		k, err := unix.Write(fd, buf)
		if err == unix.EAGAIN {
			return n
		}
		if err != nil {
			t.Fatalf("write after %d bytes: %v", n, err)
		}
		n += k
	}
}
