package agent

import (
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// verify splits ends, live entries read from the ledgers, into those whose
// process still holds the socket the entry names (live) and those it no
// longer holds (dead: closed where the library could not see it), and
// remembers the dead ones in their ledgers, which skip them from then on
// (ledger.go, the design note). A ledger checked less than minAge ago is
// taken as it reads.
func (s *ledgers) verify(ends []ledgerEnd, minAge time.Duration) (live, dead []ledgerEnd) {
	now := time.Now()
	due := map[*ledger]bool{}
	s.mu.Lock()
	for _, e := range ends {
		if _, seen := due[e.l]; !seen {
			due[e.l] = now.Sub(e.l.verified) >= minAge
			if due[e.l] {
				e.l.verified = now
			}
		}
	}
	s.mu.Unlock()
	return s.check(ends, due)
}

// verifyEnds is verify of ends alone, now: the ledgers they are in are not
// taken as checked (their other entries were not).
func (s *ledgers) verifyEnds(ends []ledgerEnd) (live, dead []ledgerEnd) {
	due := map[*ledger]bool{}
	for _, e := range ends {
		due[e.l] = true
	}
	return s.check(ends, due)
}

// check is verify of the ends in due ledgers; the others are live.
func (s *ledgers) check(ends []ledgerEnd, due map[*ledger]bool) (live, dead []ledgerEnd) {
	socks := map[*ledger]map[uint64]bool{} // each process's sockets, read on the first miss
	var restored []ledgerEnd
	for _, e := range ends {
		if !due[e.l] {
			live = append(live, e)
			continue
		}
		held, ino := holds(e, socks)
		switch {
		case !held:
			dead = append(dead, e)
		case ino != 0:
			e.sock = ino
			restored = append(restored, e)
			fallthrough
		default:
			live = append(live, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range dead {
		e.l.dead[e.off] = e.seq // a slot the library reused meanwhile has another seq
	}
	for _, e := range restored {
		e.l.restored[e.off] = restamp{seq: e.seq, sock: e.sock}
	}
	return live, dead
}

// holds says whether e's process holds the socket e names: at the
// descriptor e names (one readlink), else at any other (a dup; all its
// descriptors read once per check). A process whose descriptors cannot
// be read is taken to hold it: a process that is gone is pruned.
//
// A migrated container's processes hold their sockets under other inodes
// than their libraries wrote (CRIU made them anew), and a library that
// does not call its agent never writes them again. So an overlay end
// whose descriptor holds a TCP socket at the entry's two ends is held too,
// and ino is that socket's inode, which verify remembers for the entry.
func holds(e ledgerEnd, socks map[*ledger]map[uint64]bool) (held bool, ino uint64) {
	if e.sock == 0 {
		return true, 0
	}
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", e.l.pid, e.fd))
	if err == nil && link == socketLink(e.sock) {
		return true, 0
	}
	all, read := socks[e.l]
	if !read {
		all = socketsOf(e.l.pid)
		socks[e.l] = all
	}
	if all == nil || all[e.sock] {
		return true, 0
	}
	if err == nil && e.path == pathOverlay && strings.HasPrefix(link, "socket:[") {
		return restoredAt(e)
	}
	return false, 0
}

// restoredAt says whether e's descriptor holds a socket at e's two ends,
// and returns its inode (holds).
func restoredAt(e ledgerEnd) (held bool, ino uint64) {
	err := withFDOf(e.l.pid, int(e.fd), func(fd int) error {
		local, err := unix.Getsockname(fd)
		if err != nil {
			return err
		}
		remote, err := unix.Getpeername(fd)
		if err != nil {
			return err
		}
		if addrPortOf(local) != e.local || addrPortOf(remote) != e.remote {
			return fmt.Errorf("another connection")
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		ino = st.Ino
		return nil
	})
	return err == nil, ino
}

// addrPortOf returns a TCP socket's address, a v4-mapped one as IPv4 (as
// ledger entries have them); the zero AddrPort for any other family.
func addrPortOf(sa unix.Sockaddr) netip.AddrPort {
	switch sa := sa.(type) {
	case *unix.SockaddrInet4:
		return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), uint16(sa.Port))
	case *unix.SockaddrInet6:
		return netip.AddrPortFrom(netip.AddrFrom16(sa.Addr).Unmap(), uint16(sa.Port))
	}
	return netip.AddrPort{}
}

// socketLink is what /proc/<pid>/fd/<n> reads for a socket of inode ino.
func socketLink(ino uint64) string { return "socket:[" + strconv.FormatUint(ino, 10) + "]" }

// socketsOf returns the inodes of the sockets process pid holds, or nil
// if its descriptors cannot be read.
func socketsOf(pid int32) map[uint64]bool {
	dir := fmt.Sprintf("/proc/%d/fd/", pid)
	fds, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[uint64]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(dir + fd.Name())
		if err != nil || !strings.HasPrefix(link, "socket:[") || !strings.HasSuffix(link, "]") {
			continue
		}
		if ino, err := strconv.ParseUint(link[len("socket:["):len(link)-1], 10, 64); err == nil {
			out[ino] = true
		}
	}
	return out
}
