package agent

// Design note: the ledger (PROTOCOL.md, "Links", "The ledger").
//
// The agent hears of no linked connection one by one: a notice per
// connection end cost it more CPU than the link saved. A process that uses
// links lists its live linked connections in a memfd instead, its ledger,
// and hands it over once (LEDGER). The agent maps it read-only and
// MAP_SHARED, so it sees the library's writes, closes the descriptor, and
// reads the mapping only when it lists or counts: CONNS, STATUS, and the
// budget checks of a link grant and of a channel's reservation (shm.go).
// It reads the entries each time: a ledger is up to 8 MiB (65536 entries
// of 128 bytes, room for a reason), of which only the pages written are
// read (below).
// A ledger belongs to its process (the session's pid, from the kernel): a
// new LEDGER of that pid replaces it, and it is unmapped once the process
// is gone, which every listing or count checks first (a budget check
// only before it refuses). Either way its opened counts are folded into
// the totals.
//
// Cross-host links (crosshost_link.go) list their connections here too: path
// host-tcp, holding no shm (bytes 0 whatever the entry says), counted in
// the header's opened_tcp. So does every connection the agent answered
// (any path, with the answer's reason; not counted in the header): the
// agent's table lists such an end until CLOSED, the ledger after it, and
// a restarted agent, whose table is empty, finds them all here, in the
// ledgers it looks for itself (ledgerscan.go).
//
// The library can write the memory while the agent reads it, so nothing
// read from it is trusted. The size and the slot count are those checked
// at LEDGER, and the memfd is sealed against shrinking and growing, so the
// mapping cannot fault past its end. An entry is read as a seqlock (seq,
// the fields, seq again, all atomic loads) and taken only when both seq
// reads are the same odd value and its lengths and path are valid. A lie
// costs only the liar: its own listing and its container's budget.
//
// Reading allocates nothing and follows what the process holds
// (BROKERING.md, "Reading the ledgers"): only the pages mincore reports
// resident are read, and an entry is checked against the process's fd and
// socket inode (verify), so a connection closed behind the library's back
// is seen as gone.

import (
	"encoding/binary"
	"maps"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// The ledger's layout, in host byte order (PROTOCOL.md, "The ledger").
const (
	ledgerMagic        = "FFLG"
	ledgerVersion      = 3
	ledgerHeaderSize   = 64
	ledgerEntrySize    = 128
	ledgerMaxSlots     = 1 << 16
	ledgerOffVersion   = 4  // header: u32, ledgerVersion
	ledgerOffSlots     = 8  // header: u32, the entries that follow
	ledgerOffEntry     = 12 // header: u32, ledgerEntrySize
	ledgerOffOpened    = 16 // header: u64, linked shm connections the process ever opened
	ledgerOffOpenedTCP = 24 // header: u64, the same for linked host-tcp connections
	ledgerOffNoLibrary = 32 // header: u64, connections accepted from peers without the library
	ledgerOffUsed      = 40 // header: u32, entries handed out so far: every live one is below
	ledgerOffUsedKept  = 44 // header: u32, 1: used is kept (0 there: none yet); 0: a library from before the count

	entryOffSeq       = 0   // u32: odd while live
	entryOffBytes     = 4   // u32: the shm memory the entry's channel holds
	entryOffLocalLen  = 8   // u8: 6 or 18
	entryOffRemoteLen = 9   // u8: 6 or 18
	entryOffPath      = 10  // u8: a PATH_KIND, 0 to 3
	entryOffReasonLen = 11  // u8: 0 to 64
	entryOffLocal     = 12  // an endpoint attribute's value, 18 bytes of room
	entryOffRemote    = 30  // likewise
	entryOffReason    = 48  // the REASON the agent answered, 64 bytes of room
	entryMaxReason    = 64  // the reason's room
	entryOffFD        = 112 // i32: the descriptor the library put the connection at
	entryOffIno       = 120 // u64: the inode of the socket there; 0: not checked
	entryFieldsEnd    = ledgerEntrySize
)

// ledgerSeals are the seals a ledger needs so that its mapping keeps its
// size; the library adds F_SEAL_SEAL too, which the agent does not need.
const ledgerSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW

// ledger is one process's ledger, mapped.
type ledger struct {
	self     directory.Container // the process's container
	pid      int32               // the process
	mem      []byte              // read-only, 64 + 128 * slots bytes, as checked at LEDGER
	ino      uint64              // the memfd's inode: the same ledger sent again
	dead     map[int]uint32      // entries found closed behind the library (verify): offset -> seq
	restored map[int]restamp     // entries found held under another inode after a migration (verify)
	verified time.Time           // of the last check of its entries
}

// restamp is the inode an entry's socket has now, for the entry's seq.
type restamp struct {
	seq  uint32
	sock uint64
}

// ledgerEntry is a live entry: one end of a connection, decided over a
// link or answered by an agent.
type ledgerEntry struct {
	path          uint8  // a PATH_KIND
	bytes         uint32 // 0 but for shm
	local, remote netip.AddrPort
	reason        string // why overlay, or for unix why not shm
	mapped        bool   // local is v4-mapped IPv6 as the library wrote it: its program's socket is IPv6 (dual stack)
	fd            int32  // where the process holds it
	sock          uint64 // the inode of the socket at fd; 0: not checked
	off           int    // the entry's offset in the ledger
	seq           uint32 // and its seq when read
}

// openedCounts are a ledger header's counts of the connections its process
// decided without the agent: the linked ones it ever opened, by path, and
// those it accepted from peers without the library (overlay).
type openedCounts struct{ shm, tcp, noLibrary uint64 }

func (o *openedCounts) add(p openedCounts) {
	o.shm += p.shm
	o.tcp += p.tcp
	o.noLibrary += p.noLibrary
}

// ledgers holds the ledger of every process that sent one.
type ledgers struct {
	mu     sync.Mutex // guards m and folded; held while a mapping is read, so none is unmapped under a reader
	m      map[int32]*ledger
	folded openedCounts // of the ledgers replaced or dropped
	limit  int          // ledgers per container (maxLedgersPerContainer)
}

func newLedgers() *ledgers { return &ledgers{m: map[int32]*ledger{}, limit: maxLedgersPerContainer} }

// handleLedger applies LEDGER, a notification: the memfd it carries
// becomes the ledger of the caller's process.
func (s *session) handleLedger() error {
	if err := s.libraryRequest(protocol.TypeLedger); err != nil {
		return err
	}
	if len(s.inFDs) != 1 {
		return protocol.Errorf(protocol.CodeInvalid,
			"LEDGER carries %d file descriptors; it carries exactly one, the process's ledger memfd", len(s.inFDs))
	}
	return s.a.ledgers.add(s.pid, s.self, s.inFDs[0])
}

// add maps the ledger memfd fd (the caller keeps fd) as the ledger of
// process pid in container self, replacing the one pid had.
//
// A library sends its ledger again on a new session after a session broke
// (the agent may have restarted); the same memfd (inode) again changes
// nothing, so its opened counts are not folded in twice.
func (s *ledgers) add(pid int32, self directory.Container, fd int) error {
	s.prune() // nobody may list for a while: processes that are gone leave room here
	return s.put(pid, self, fd)
}

// put is add without the pruning, for many ledgers at once.
func (s *ledgers) put(pid int32, self directory.Container, fd int) error {
	mem, ino, err := mapLedger(fd)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.hasLocked(ino) { // sent again, or found again by a scan (ledgerscan.go)
		unix.Munmap(mem)
		return nil
	}
	if s.m[pid] == nil && s.countLocked(self.ID) >= s.limit {
		unix.Munmap(mem)
		return protocol.Errorf(protocol.CodeLimit,
			"container %s has %d processes with a ledger, its limit; this process's linked and agent-answered connections are not listed", self.ID, s.limit)
	}
	if s.m[pid] != nil {
		s.dropLocked(pid)
	}
	s.m[pid] = &ledger{self: self, pid: pid, mem: mem, ino: ino, dead: map[int]uint32{}, restored: map[int]restamp{}}
	return nil
}

// maxLedgersPerContainer bounds the ledgers one container's processes
// have mapped at once (limits.go): each is a mapping of up to 8 MiB of
// the agent's address space and one of its memory maps.
const maxLedgersPerContainer = 1024

// countLocked returns how many ledgers container id's processes have.
func (s *ledgers) countLocked(id string) int {
	n := 0
	for _, l := range s.m {
		if l.self.ID == id {
			n++
		}
	}
	return n
}

// hasLocked reports whether a process's ledger is the memfd of inode ino:
// one memfd, held by two processes (one inherited it without the library
// knowing), is listed once.
func (s *ledgers) hasLocked(ino uint64) bool {
	for _, l := range s.m {
		if l.ino == ino {
			return true
		}
	}
	return false
}

// holds says whether the agent holds process pid's ledger: what a link
// makes is counted only there, so a process without one gets no link.
func (s *ledgers) holds(pid int32) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.m[pid]
	return ok
}

// mapLedger checks that fd is a ledger memfd (size, seals, header) and
// maps it read-only; it returns the mapping and the memfd's inode.
func mapLedger(fd int) ([]byte, uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, 0, protocol.Errorf(protocol.CodeInvalid, "LEDGER's descriptor cannot be read (fstat: %v); send the ledger memfd", err)
	}
	size := st.Size
	if size < ledgerHeaderSize+ledgerEntrySize || size > ledgerHeaderSize+ledgerMaxSlots*ledgerEntrySize ||
		(size-ledgerHeaderSize)%ledgerEntrySize != 0 {
		return nil, 0, protocol.Errorf(protocol.CodeInvalid,
			"LEDGER's descriptor is not a ledger memfd of 64 + 128 * slots bytes, 1 to %d slots (it has %d bytes); make it as PROTOCOL.md says",
			ledgerMaxSlots, size)
	}
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0) // EINVAL: not a memfd
	if err != nil || seals&ledgerSeals != ledgerSeals {
		return nil, 0, protocol.Errorf(protocol.CodeInvalid,
			"LEDGER's memfd is not sealed against shrinking and growing (seals %#x, %v); seal it with F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL",
			seals, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return nil, 0, protocol.Errorf(protocol.CodeInternal, "the agent could not map a ledger of %d bytes: %v", size, err)
	}
	if err := checkLedgerHeader(mem); err != nil {
		unix.Munmap(mem)
		return nil, 0, err
	}
	return mem, st.Ino, nil
}

// checkLedgerHeader checks the header of the ledger mapped at mem, whose
// size is already checked.
func checkLedgerHeader(mem []byte) error {
	slots := (len(mem) - ledgerHeaderSize) / ledgerEntrySize
	magic, version, n, entry := load32(mem, 0), load32(mem, ledgerOffVersion), load32(mem, ledgerOffSlots), load32(mem, ledgerOffEntry)
	var bad string
	switch {
	case magic != binary.NativeEndian.Uint32([]byte(ledgerMagic)):
		bad = "it does not start with FFLG"
	case version != ledgerVersion:
		bad = "its version is not 3"
	case n != uint32(slots):
		bad = "its slots do not match its size"
	case entry != ledgerEntrySize:
		bad = "its entry_size is not 128"
	default:
		return nil
	}
	return protocol.Errorf(protocol.CodeInvalid,
		"LEDGER's memfd has no valid ledger header: %s (version %d, slots %d, entry_size %d, %d bytes); write the header as PROTOCOL.md says",
		bad, version, n, entry, len(mem))
}

// prune drops the ledgers of processes that are gone. Pids are checked
// outside the lock.
func (s *ledgers) prune() {
	s.mu.Lock()
	gone := maps.Clone(s.m)
	s.mu.Unlock()
	for pid := range gone {
		if alive(pid) {
			delete(gone, pid)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid, l := range gone {
		if s.m[pid] == l { // not replaced meanwhile by a new process of that pid
			s.dropLocked(pid)
		}
	}
}

// dropLocked unmaps pid's ledger, keeping its opened counts.
func (s *ledgers) dropLocked(pid int32) {
	l := s.m[pid]
	s.folded.add(l.opened())
	unix.Munmap(l.mem)
	delete(s.m, pid)
}

// close unmaps every ledger (the agent stops).
func (s *ledgers) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pid := range s.m {
		s.dropLocked(pid)
	}
}

// read calls fn for every ledger with the store locked, and returns the
// opened counts of the ledgers dropped so far. It does not prune: a
// budget check, on the path of every new channel, would pay a syscall per
// process; whoever lists prunes first, and so does a budget check before
// it refuses.
func (s *ledgers) read(fn func(*ledger)) (folded openedCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, l := range s.m {
		fn(l)
	}
	return s.folded
}

// opened returns the linked connections the processes ever opened, by
// path, those of the ledgers dropped included.
func (s *ledgers) opened() openedCounts {
	var opened openedCounts
	folded := s.read(func(l *ledger) { opened.add(l.opened()) })
	opened.add(folded)
	return opened
}

// shmEntries returns the live shm entries of the ledgers of container id,
// at most max of them (copied with the store locked, so that no other lock
// is held while a container's memory is read); over says there are more.
func (s *ledgers) shmEntries(id string, max int) (out []ledgerEntry, over bool) {
	s.read(func(l *ledger) {
		if l.self.ID != id || over {
			return
		}
		l.read(true, func(e ledgerEntry) bool {
			if len(out) == max {
				over = true
				return false
			}
			out = append(out, e)
			return true
		})
	})
	return out, over
}

// ledgerEnd is a live entry and the ledger it is in.
type ledgerEnd struct {
	self directory.Container
	l    *ledger
	ledgerEntry
}

func (e ledgerEnd) key() connKey { return connKey{e.self.ID, e.local, e.remote} }

// ends returns the live entries of the ledgers of container id, or of
// every container if id is "".
func (s *ledgers) ends(id string) []ledgerEnd {
	var out []ledgerEnd
	s.read(func(l *ledger) {
		if id == "" || l.self.ID == id {
			l.each(func(e ledgerEntry) { out = append(out, ledgerEnd{l.self, l, e}) })
		}
	})
	return out
}

// ledgerConns lists live ledger entries as connection ends of their
// process's container; the remote container is the one that has the
// remote address: for shm and unix one of this host, as they join two
// processes of this host, otherwise one of any host.
func (a *Agent) ledgerConns(ends []ledgerEnd) []agentapi.ConnInfo {
	out := make([]agentapi.ConnInfo, 0, len(ends))
	for _, e := range ends {
		peer, _ := a.dir.LookupIP(e.remote.Addr().String())
		if (e.path == pathShm || e.path == pathUnix) && peer.Host != a.cfg.Host {
			peer = directory.Container{}
		}
		out = append(out, connInfo(e.self, peer, e.local, e.remote, decision{kind: e.path, reason: e.reason}))
	}
	return out
}

// opened is the header's counts of the connections its process decided
// without the agent.
func (l *ledger) opened() openedCounts {
	return openedCounts{
		shm:       atomic.LoadUint64((*uint64)(unsafe.Pointer(&l.mem[ledgerOffOpened]))),
		tcp:       atomic.LoadUint64((*uint64)(unsafe.Pointer(&l.mem[ledgerOffOpenedTCP]))),
		noLibrary: atomic.LoadUint64((*uint64)(unsafe.Pointer(&l.mem[ledgerOffNoLibrary]))),
	}
}

// each calls fn for every live entry of l, reading only resident pages.
func (l *ledger) each(fn func(ledgerEntry)) {
	l.read(false, func(e ledgerEntry) bool { fn(e); return true })
}

// read calls fn for every live entry of l, or with shmOnly for every live
// shm entry (reason unread), reading only entries handed out in resident
// pages, until fn returns false.
func (l *ledger) read(shmOnly bool, fn func(ledgerEntry) bool) {
	page := os.Getpagesize()
	end := ledgerHeaderSize + l.handedOut()*ledgerEntrySize
	resident := residentPages(l.mem[:end], page)
	for off := ledgerHeaderSize; off < end; off += ledgerEntrySize {
		if resident != nil && resident[off/page]&1 == 0 {
			// To the last entry that starts in this page (the loop steps
			// past it): most of a ledger's pages were never written.
			off += ((off/page+1)*page - off - 1) / ledgerEntrySize * ledgerEntrySize
			continue
		}
		if seq, dead := l.dead[off]; dead && seq == load32(l.mem, off) {
			continue
		} else if dead {
			delete(l.dead, off) // the library freed or reused the slot
		}
		e, ok := readEntry(l.mem, off, shmOnly)
		if r, restored := l.restored[off]; ok && restored {
			if r.seq == e.seq {
				e.sock = r.sock
			} else {
				delete(l.restored, off)
			}
		}
		if ok && !fn(e) {
			return
		}
	}
}

// handedOut returns how many entries the library has handed out, as its
// header says: every live one is below, and a budget check on every new
// channel reads no page past them (mincore of all 2048 pages cost more
// than the rest of the decision). 0 with used_kept 1 is a process that
// has handed out none yet (a pre-forking server's master, which never
// connects: its whole ledger was read at every budget check of its
// container, a third of the agent's CPU under wrk with new connections);
// 0 without it is a library from before the count (both words were 0
// then): all its entries are read. A library that says less than it uses
// hides its own connections, as it could by not listing them.
func (l *ledger) handedOut() int {
	slots := (len(l.mem) - ledgerHeaderSize) / ledgerEntrySize
	if used := int(load32(l.mem, ledgerOffUsed)); used > 0 || load32(l.mem, ledgerOffUsedKept) == 1 {
		return min(used, slots)
	}
	return slots
}

// residentPages returns mincore's vector for mem (bit 0 of byte i: page i
// is in memory), or nil if mincore fails: then every page is read.
func residentPages(mem []byte, page int) []byte {
	vec := make([]byte, (len(mem)+page-1)/page)
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&mem[0])), uintptr(len(mem)), uintptr(unsafe.Pointer(&vec[0])))
	if errno != 0 {
		return nil
	}
	return vec
}

// readEntry reads the entry at off of a ledger mapped at mem; ok is false
// unless it is live, read whole and valid, and with shmOnly an shm entry,
// whose reason is then not read (a budget check, on the path of every new
// channel, needs only the endpoints and the bytes).
func readEntry(mem []byte, off int, shmOnly bool) (e ledgerEntry, ok bool) {
	seq := load32(mem, off+entryOffSeq)
	if seq&1 == 0 {
		return e, false
	}
	var f [entryFieldsEnd]byte // a copy of the fields, taken word by word
	end := entryFieldsEnd
	if shmOnly {
		end = entryOffReason
	}
	for w := 4; w < end; w += 4 {
		binary.NativeEndian.PutUint32(f[w:], load32(mem, off+w))
	}
	path, reasonLen := f[entryOffPath], int(f[entryOffReasonLen])
	if load32(mem, off+entryOffSeq) != seq || path > pathShm || reasonLen > entryMaxReason || (shmOnly && path != pathShm) {
		return e, false
	}
	if shmOnly {
		reasonLen = 0
	}
	local, okLocal := entryEndpoint(f[:], entryOffLocal, f[entryOffLocalLen])
	remote, okRemote := entryEndpoint(f[:], entryOffRemote, f[entryOffRemoteLen])
	if !okLocal || !okRemote {
		return e, false
	}
	e = ledgerEntry{path: path, local: unmapEP(local), remote: unmapEP(remote), mapped: local.Addr().Is4In6(),
		reason: printable(f[entryOffReason : entryOffReason+reasonLen]),
		fd:     int32(binary.NativeEndian.Uint32(f[entryOffFD:])), sock: binary.NativeEndian.Uint64(f[entryOffIno:]),
		off: off, seq: seq}
	if path == pathShm {
		e.bytes = binary.NativeEndian.Uint32(f[entryOffBytes:])
	}
	return e, true
}

// printable returns b with every byte that is not printable ASCII as '?':
// a reason is a word such as shm-budget, and what a library writes must
// not reach the terminal of whoever runs `freeflow conns` as control
// sequences.
func printable(b []byte) string {
	return strings.Map(func(r rune) rune {
		if r < '!' || r > '~' {
			return '?'
		}
		return r
	}, string(b))
}

// entryEndpoint decodes the endpoint of n bytes at off in an entry's
// fields, which have room for 18; ParseEndpoint takes only 6 or 18.
func entryEndpoint(f []byte, off int, n byte) (netip.AddrPort, bool) {
	if n > 18 {
		return netip.AddrPort{}, false
	}
	return protocol.ParseEndpoint(f[off : off+int(n)])
}

// load32 is an atomic load of the u32 at off (a multiple of 4) of a mapping.
func load32(mem []byte, off int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[off])))
}
