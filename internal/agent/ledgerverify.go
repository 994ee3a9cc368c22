package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
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
	socks := map[*ledger]map[uint64]bool{} // each process's sockets, read on the first miss
	for _, e := range ends {
		if !due[e.l] || holds(e, socks) {
			live = append(live, e)
		} else {
			dead = append(dead, e)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, e := range dead {
		e.l.dead[e.off] = e.seq // a slot the library reused meanwhile has another seq
	}
	return live, dead
}

// holds says whether e's process holds the socket e names: at the
// descriptor e names (one readlink), else at any other (a dup; all its
// descriptors read once per check). A process whose descriptors cannot
// be read is taken to hold it: a process that is gone is pruned.
func holds(e ledgerEnd, socks map[*ledger]map[uint64]bool) bool {
	if e.sock == 0 {
		return true
	}
	link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", e.l.pid, e.fd))
	if err == nil && link == socketLink(e.sock) {
		return true
	}
	held, read := socks[e.l]
	if !read {
		held = socketsOf(e.l.pid)
		socks[e.l] = held
	}
	return held == nil || held[e.sock]
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
