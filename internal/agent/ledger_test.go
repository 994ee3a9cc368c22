package agent

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// testLedger is a ledger as a library keeps it: a memfd the test maps
// read-write and writes entries into, as PROTOCOL.md ("The ledger") says.
type testLedger struct {
	name string // of the memfd, as /proc/self/maps and /proc/self/fd show it
	fd   int    // -1 once closed
	mem  []byte
}

const sealsAll = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// newTestLedger makes a ledger of slots entries as the library does.
func newTestLedger(t *testing.T, slots uint32) *testLedger {
	t.Helper()
	return newLedgerMemfd(t, ledgerHeaderSize+int64(slots)*ledgerEntrySize, slots, sealsAll)
}

// newLedgerMemfd makes a memfd of size bytes with a ledger header that
// says slots, sealed with seals; the test undoes it when it ends.
func newLedgerMemfd(t *testing.T, size int64, slots uint32, seals int) *testLedger {
	t.Helper()
	return newNamedLedger(t, "fft-ledger-"+randName(8), size, slots, seals)
}

// newNamedLedger is newLedgerMemfd for a memfd named name; a library's is
// named "freeflow-ledger", which the agent looks for (ledgerscan.go).
func newNamedLedger(t *testing.T, name string, size int64, slots uint32, seals int) *testLedger {
	t.Helper()
	l := &testLedger{name: name, fd: -1}
	fd, err := unix.MemfdCreate(l.name, unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	l.fd = fd
	t.Cleanup(l.closeFD)
	if err := unix.Ftruncate(fd, size); err != nil {
		t.Fatal(err)
	}
	if l.mem, err = unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(l.mem) })
	l.header(ledgerMagic, ledgerVersion, slots, ledgerEntrySize)
	if seals != 0 {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
			t.Fatal(err)
		}
	}
	return l
}

func (l *testLedger) closeFD() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

func (l *testLedger) header(magic string, version, slots, entrySize uint32) {
	copy(l.mem, magic)
	binary.NativeEndian.PutUint32(l.mem[4:], version)
	binary.NativeEndian.PutUint32(l.mem[8:], slots)
	binary.NativeEndian.PutUint32(l.mem[12:], entrySize)
}

func (l *testLedger) setOpened(n uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&l.mem[ledgerOffOpened])), n)
}

func (l *testLedger) setOpenedTCP(n uint64) {
	atomic.StoreUint64((*uint64)(unsafe.Pointer(&l.mem[ledgerOffOpenedTCP])), n)
}

func (l *testLedger) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&l.mem[off])) }

func entryOff(i int) int { return ledgerHeaderSize + i*ledgerEntrySize }

// publish writes entry i's fields, then makes its seq odd, as the library
// opens an entry.
func (l *testLedger) publish(i int, f [entryFieldsEnd]byte) {
	if used := l.word(ledgerOffUsed); atomic.LoadUint32(used) <= uint32(i) {
		atomic.StoreUint32(used, uint32(i)+1) // handed out before it is published, as the library does
	}
	for w := 4; w < entryFieldsEnd; w += 4 {
		atomic.StoreUint32(l.word(entryOff(i)+w), binary.NativeEndian.Uint32(f[w:]))
	}
	if atomic.AddUint32(l.word(entryOff(i)), 1)&1 == 0 {
		panic("publish of a live entry")
	}
}

// free makes entry i's seq even, as the library closes an entry.
func (l *testLedger) free(i int) {
	if atomic.AddUint32(l.word(entryOff(i)), 1)&1 != 0 {
		panic("free of a free entry")
	}
}

// put publishes entry i: a shm end from local to remote holding bytes.
func (l *testLedger) put(i int, bytes uint32, local, remote string) {
	l.publish(i, entryFields(bytes, local, remote))
}

// putTCP publishes entry i: a host-tcp end (a cross-host link's) from
// local to remote; the library writes bytes 0.
func (l *testLedger) putTCP(i int, bytes uint32, local, remote string) {
	f := entryFields(bytes, local, remote)
	f[entryOffPath] = pathHostTCP
	l.publish(i, f)
}

// putAnswer publishes entry i: an end on path, holding bytes, with the
// reason the agent answered, as a library lists what its agent answered.
func (l *testLedger) putAnswer(i int, path uint8, bytes uint32, local, remote, reason string) {
	f := entryFields(bytes, local, remote)
	f[entryOffPath] = path
	f[entryOffReasonLen] = byte(copy(f[entryOffReason:], reason))
	l.publish(i, f)
}

// entryFields encodes an entry's fields; the endpoints keep their form
// (an IPv4-mapped address stays 18 bytes).
func entryFields(bytes uint32, local, remote string) (f [entryFieldsEnd]byte) {
	ep := func(s string) []byte {
		ap := netip.MustParseAddrPort(s)
		return binary.BigEndian.AppendUint16(ap.Addr().AsSlice(), ap.Port())
	}
	binary.NativeEndian.PutUint32(f[entryOffBytes:], bytes)
	f[entryOffLocalLen] = byte(copy(f[entryOffLocal:], ep(local)))
	f[entryOffRemoteLen] = byte(copy(f[entryOffRemote:], ep(remote)))
	f[entryOffPath] = pathShm
	return f
}

// agentMaps counts the read-only shared mappings of memfd name in this
// process: the agent's (the test maps its ledgers read-write).
func agentMaps(t *testing.T, name string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 6 && f[1] == "r--s" && f[5] == "/memfd:"+name {
			n++
		}
	}
	return n
}

// openFDs counts this process's descriptors of memfd name.
func openFDs(t *testing.T, name string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if target, _ := os.Readlink("/proc/self/fd/" + e.Name()); target == "/memfd:"+name+" (deleted)" {
			n++
		}
	}
	return n
}

// neighbour is a second container of the test host; remoteContainer is
// on another.
var neighbour = directory.Container{ID: "nb0", Name: "neighbour", Host: testHost, IP: "10.244.1.20", Tenant: "blue", FreeFlow: true}

func linkedEnd(local, remote, remoteContainer string) agentapi.ConnInfo {
	return agentapi.ConnInfo{Local: local, Remote: remote, LocalContainer: "self", RemoteContainer: remoteContainer, Path: "shm"}
}

func linkedTCPEnd(local, remote, remoteContainer string) agentapi.ConnInfo {
	c := linkedEnd(local, remote, remoteContainer)
	c.Path = "host-tcp"
	return c
}

// The live entries of a process's ledger are listed in CONNS as shm ends
// of its container, with the connections the agent answered, and counted
// in STATUS; the agent keeps a read-only mapping and no descriptor, and
// an entry the library frees is gone from both.
func TestLedgerListedAndCounted(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf, neighbour, remoteContainer), nil)
	cli := fastPathListed(t, a, 47100) // two ends the agent answered, unix
	l := newTestLedger(t, 200)
	l.setOpened(10)
	l.put(0, uint32(shmBytes), selfCli(47000), selfSrv)
	l.put(1, 1000, selfCli(47001), neighbour.IP+":9000")
	l.put(2, 2000, selfCli(47002), "10.244.1.77:80")                          // no container
	l.put(150, 3000, "[::ffff:10.244.1.9]:47003", "[::ffff:10.244.2.5]:5432") // on another page; remote on another host
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	if n, m := openFDs(t, l.name), agentMaps(t, l.name); n != 1 || m != 1 {
		t.Fatalf("%d descriptors and %d read-only mappings of the ledger; want the test's descriptor and the agent's mapping", n, m)
	}

	answered := a.live.list()
	want := append([]agentapi.ConnInfo{
		linkedEnd(selfCli(47000), selfSrv, "self"),
		linkedEnd(selfCli(47001), neighbour.IP+":9000", "neighbour"),
		linkedEnd(selfCli(47002), "10.244.1.77:80", ""),
		linkedEnd(selfCli(47003), "10.244.2.5:5432", ""),
	}, answered...)
	sortConns(want)
	if got := a.connList(); len(answered) != 2 || fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("conns:\n got %+v\nwant %+v", got, want)
	}
	c := a.status().Connections
	if c.FastPath != 12 || c.Shm != 10 || c.Unix != 2 || c.Live != 6 || c.ShmBytes != shmBytes+6000 {
		t.Errorf("counters %+v; want the 2 answered unix ends plus opened 10 as shm, 6 live, %d shm bytes", c, shmBytes+6000)
	}
	var st unix.Stat_t
	if err := unix.Fstat(l.fd, &st); err != nil || st.Blocks*512 != 2*int64(os.Getpagesize()) {
		t.Errorf("the ledger holds %d bytes of memory (%v); want the 2 pages the test wrote: reading allocates no other", st.Blocks*512, err)
	}

	l.free(1)
	l.free(150)
	want = append([]agentapi.ConnInfo{
		linkedEnd(selfCli(47000), selfSrv, "self"),
		linkedEnd(selfCli(47002), "10.244.1.77:80", ""),
	}, answered...)
	sortConns(want)
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns after two entries were freed:\n got %+v\nwant %+v", got, want)
	}
	if c := a.status().Connections; c.Shm != 10 || c.Live != 4 || c.ShmBytes != shmBytes+2000 {
		t.Errorf("counters after two entries were freed: %+v; want opened 10, 4 live, %d shm bytes", c, shmBytes+2000)
	}
}

// Entries of cross-host linked connections (path 2) are listed as
// host-tcp ends whose remote container is on any host, hold no shm
// whatever bytes they say, and opened_tcp counts in fast_path and
// host_tcp, opened in fast_path and shm.
func TestLedgerListsHostTCPEnds(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf, neighbour, remoteContainer), nil)
	cli := newLib(t, a)
	l := newTestLedger(t, 8)
	l.setOpened(4)
	l.setOpenedTCP(3)
	l.put(0, 1000, selfCli(47500), neighbour.IP+":9000")
	l.putTCP(1, 0, selfCli(47501), remoteContainer.IP+":5432")
	l.putTCP(2, 5000, selfCli(47502), "10.244.2.77:80") // a lie about bytes: host-tcp holds no shm
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	want := []agentapi.ConnInfo{
		linkedEnd(selfCli(47500), neighbour.IP+":9000", "neighbour"),
		linkedTCPEnd(selfCli(47501), remoteContainer.IP+":5432", "db"),
		linkedTCPEnd(selfCli(47502), "10.244.2.77:80", ""),
	}
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns:\n got %+v\nwant %+v", got, want)
	}
	if c := a.status().Connections; c.FastPath != 7 || c.Shm != 4 || c.HostTCP != 3 || c.Live != 3 || c.ShmBytes != 1000 {
		t.Errorf("counters %+v; want opened 4 as shm and 3 as host_tcp, 3 live, 1000 shm bytes", c)
	}
}

// ledgerRefusal is a LEDGER the agent must refuse: the descriptors it
// carries, and what its error must name.
type ledgerRefusal struct {
	name string
	fds  func(t *testing.T) []int
	says string
}

// badLedger returns the descriptor of a ledger with one live entry, spoilt
// by spoil, which may also replace the memfd.
func badLedger(spoil func(l *testLedger)) func(t *testing.T) []int {
	return func(t *testing.T) []int {
		l := newTestLedger(t, 2)
		spoil(l)
		return []int{l.fd}
	}
}

// liveLedger makes a ledger memfd with opened 7 and, if it has room, one
// live entry, so that accepting it by mistake shows in CONNS and STATUS.
func liveLedger(t *testing.T, size int64, slots uint32, seals int) *testLedger {
	l := newLedgerMemfd(t, size, slots, seals)
	l.setOpened(7)
	if size >= ledgerHeaderSize+ledgerEntrySize {
		l.put(0, 100, selfCli(47200), selfSrv)
	}
	return l
}

func ledgerRefusals() []ledgerRefusal {
	fdsOf := func(mk func(t *testing.T) *testLedger) func(t *testing.T) []int {
		return func(t *testing.T) []int { return []int{mk(t).fd} }
	}
	sized := func(size int64, slots uint32) func(t *testing.T) []int {
		return fdsOf(func(t *testing.T) *testLedger { return liveLedger(t, size, slots, sealsAll) })
	}
	sealed := func(seals int) func(t *testing.T) []int {
		return fdsOf(func(t *testing.T) *testLedger { return liveLedger(t, 64+128*2, 2, seals) })
	}
	spoilt := func(magic string, version, slots, entrySize uint32) func(t *testing.T) []int {
		return fdsOf(func(t *testing.T) *testLedger {
			l := liveLedger(t, 64+128*2, 2, sealsAll)
			l.header(magic, version, slots, entrySize)
			return l
		})
	}
	return []ledgerRefusal{
		{"no descriptor", func(*testing.T) []int { return nil }, "carries 0 file descriptors"},
		{"two descriptors", func(t *testing.T) []int {
			return []int{liveLedger(t, 192, 1, sealsAll).fd, liveLedger(t, 192, 1, sealsAll).fd}
		}, "carries 2 file descriptors"},
		{"a pipe", func(t *testing.T) []int {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(p[0]); unix.Close(p[1]) })
			return p[:1]
		}, "not a ledger memfd"},
		{"no slots", sized(64, 0), "not a ledger memfd"},
		{"not whole entries", sized(64+128*2+8, 2), "not a ledger memfd"},
		{"over 65536 slots", sized(64+128*65537, 65537), "not a ledger memfd"},
		{"unsealed", sealed(0), "not sealed"},
		{"may grow", sealed(unix.F_SEAL_SHRINK | unix.F_SEAL_SEAL), "not sealed"},
		{"may shrink", sealed(unix.F_SEAL_GROW | unix.F_SEAL_SEAL), "not sealed"},
		{"bad magic", spoilt("FFLX", 2, 2, 128), "FFLG"},
		{"version 1", spoilt(ledgerMagic, 1, 2, 128), "version"},
		{"slots 0", spoilt(ledgerMagic, 2, 0, 128), "slots"},
		{"slots beyond the size", spoilt(ledgerMagic, 2, 3, 128), "slots"},
		{"entry_size 64", spoilt(ledgerMagic, 2, 2, 64), "entry_size"},
	}
}

// A LEDGER that is not exactly one sealed ledger memfd with a valid
// header is refused with INVALID, saying what is wrong; on the wire it
// gets no reply, nothing is listed or counted, and the session goes on.
func TestLedgerRefused(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLib(t, a)
	for _, c := range ledgerRefusals() {
		fds := c.fds(t)
		s := &session{a: a.Agent, pid: int32(os.Getpid()), self: ffSelf, inFDs: fds}
		err := s.handleLedger()
		var pe *protocol.Error
		if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalid || !strings.Contains(pe.Msg(), c.says) {
			t.Errorf("%s: LEDGER gave %v; want INVALID saying %q", c.name, err, c.says)
		}
		if err := cli.ledger(fds...); err != nil {
			t.Fatalf("%s: send LEDGER: %v", c.name, err)
		}
		wantNoReplies(t, cli)
		if got, n := a.connList(), a.status().Connections; len(got) != 0 || n.Shm != 0 || n.Live != 0 || n.ShmBytes != 0 {
			t.Errorf("%s: after the refused LEDGER: conns %+v, counters %+v; want nothing", c.name, got, n)
		}
	}
}

// The retired OPENED (0x16) is no notification any more: it is answered
// ERROR UNKNOWN like any unknown type, and the session goes on.
func TestRetiredOpenedIsUnknown(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	c := dialRaw(t, a.cfg.LibrarySocket())
	if err := c.WriteMsg(protocol.New(protocol.TypeHello, 1)); err != nil {
		t.Fatal(err)
	}
	if m, _, err := c.ReadMsg(); err != nil || m.Type != protocol.TypeHelloReply {
		t.Fatalf("HELLO: %v, %v", m, err)
	}
	opened := encode(t, protocol.New(protocol.TypeClosed, 2,
		protocol.Endpoint(protocol.AttrLocalEndpoint, netip.MustParseAddrPort(selfCli(47300))),
		protocol.Endpoint(protocol.AttrRemoteEndpoint, netip.MustParseAddrPort(selfSrv)),
		protocol.U8(protocol.AttrPathKind, pathShm)))
	opened[3] = 0x16 // the encoder knows no type 0x16
	sendBytes(t, c, opened)
	wantError(t, c, protocol.CodeUnknown, 2)
	if err := c.WriteMsg(protocol.New(protocol.TypeLookup, 3, protocol.IP(netip.MustParseAddr(selfIP)))); err != nil {
		t.Fatal(err)
	}
	if m, _, err := c.ReadMsg(); err != nil || m.Type != protocol.TypeLookupReply || m.Seq != 3 {
		t.Fatalf("LOOKUP after the ERROR: %v, %v; want its reply", m, err)
	}
}

// An entry is taken only when it is live (odd seq) and valid: lengths 6
// or 18, a path kind of 0 to 3 and a reason of at most 64 bytes, shown as
// printable ASCII; nothing in it can make the agent read out of bounds.
func TestLedgerTornEntriesSkipped(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLib(t, a)
	l := newTestLedger(t, 16)
	good := entryFields(100, selfCli(47400), selfSrv)
	with := func(off int, v byte) [entryFieldsEnd]byte { f := good; f[off] = v; return f }
	l.put(0, 100, selfCli(47400), selfSrv)
	l.put(1, 100, selfCli(47401), selfSrv)
	l.free(1) // fields intact, seq even
	l.publish(2, with(entryOffLocalLen, 7))
	l.publish(3, with(entryOffRemoteLen, 0))
	l.publish(4, with(entryOffLocalLen, 255))
	l.publish(5, with(entryOffRemoteLen, 17))
	l.publish(6, with(entryOffPath, pathShm+1))
	l.publish(7, with(entryOffPath, 255))
	l.publish(9, with(entryOffReasonLen, entryMaxReason+1))
	l.publish(10, with(entryOffReasonLen, 255))
	l.putAnswer(11, pathUnix, 0, selfCli(47411), selfSrv, "\x1b[2J\xffshm budget")
	l.put(8, 100, "[fd00::9]:47408", "[fd00::8]:8080")
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	escaped := agentapi.ConnInfo{Local: selfCli(47411), Remote: selfSrv, LocalContainer: "self", RemoteContainer: "self",
		Path: "unix", Reason: "?[2J?shm?budget"} // no control sequence reaches a terminal
	want := []agentapi.ConnInfo{linkedEnd(selfCli(47400), selfSrv, "self"), linkedEnd("[fd00::9]:47408", "[fd00::8]:8080", ""), escaped}
	sortConns(want)
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns:\n got %+v\nwant %+v", got, want)
	}

	// Random bytes anywhere, the header too: the agent never panics and
	// takes only entries that pass the checks.
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200 {
		for i := range l.mem {
			l.mem[i] = byte(rng.Uint32())
			if rng.IntN(4) == 0 { // make many seqs odd and many lengths right
				l.mem[i] = []byte{1, 3, 6, 18, pathShm, pathHostTCP}[rng.IntN(6)]
			}
		}
		for _, c := range a.connList() {
			_, errLocal := netip.ParseAddrPort(c.Local)
			_, errRemote := netip.ParseAddrPort(c.Remote)
			if (c.Path != "shm" && c.Path != "host-tcp") || c.LocalContainer != "self" || errLocal != nil || errRemote != nil {
				t.Fatalf("conns entry from random bytes: %+v", c)
			}
		}
		a.status()
	}
}

// An entry rewritten while the agent reads it is never taken half old,
// half new: the library's writer makes the two ports equal in every
// entry it publishes, and the reader must never see them differ.
func TestLedgerEntryReadWhileWritten(t *testing.T) {
	l := newTestLedger(t, 1)
	l.put(0, 1, selfCli(1), selfCli(1))
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for port := 2; ; port = port%60000 + 2 {
			select {
			case <-stop:
				return
			default:
			}
			l.free(0)
			l.put(0, uint32(port), selfCli(port), selfCli(port))
		}
	}()
	taken, deadline := 0, time.Now().Add(300*time.Millisecond)
	for time.Now().Before(deadline) {
		for range 1000 {
			e, ok := readEntry(l.mem, ledgerHeaderSize, false)
			if !ok {
				continue
			}
			taken++
			if e.local != e.remote || uint32(e.local.Port()) != e.bytes {
				close(stop)
				<-done
				t.Fatalf("entry read torn: local %v, remote %v, bytes %d", e.local, e.remote, e.bytes)
			}
		}
	}
	close(stop)
	<-done
	if taken == 0 {
		t.Fatal("no entry was ever read whole; the reader takes nothing")
	}
}

// A second LEDGER of the same process replaces its first, which the
// agent unmaps, keeping its opened counts in the totals; a refused one
// replaces nothing. The agent unmaps the rest when it stops.
func TestLedgerReplacedKeepsOpened(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLib(t, a)
	first, second := newTestLedger(t, 4), newTestLedger(t, 4)
	first.setOpened(5)
	first.setOpenedTCP(4)
	first.put(0, 100, selfCli(48000), selfSrv)
	second.setOpened(2)
	second.put(0, 200, selfCli(48001), selfSrv)
	second.put(1, 300, selfCli(48002), selfSrv)

	if err := cli.ledger(first.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	if c := a.status().Connections; c.Shm != 5 || c.HostTCP != 4 || c.FastPath != 9 || c.Live != 1 || c.ShmBytes != 100 {
		t.Fatalf("counters with the first ledger: %+v; want opened 5 and opened_tcp 4, 1 live of 100 bytes", c)
	}
	if err := cli.ledger(second.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	first.put(1, 400, selfCli(48003), selfSrv) // no longer read
	want := []agentapi.ConnInfo{linkedEnd(selfCli(48001), selfSrv, "self"), linkedEnd(selfCli(48002), selfSrv, "self")}
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns after the second LEDGER:\n got %+v\nwant %+v", got, want)
	}
	if c := a.status().Connections; c.Shm != 7 || c.HostTCP != 4 || c.FastPath != 11 || c.Live != 2 || c.ShmBytes != 500 {
		t.Errorf("counters after the second LEDGER: %+v; want opened 5 + 2, opened_tcp 4 kept, 2 live of 500 bytes", c)
	}
	if err := cli.ledger(liveLedger(t, 128, 1, 0).fd); err != nil { // unsealed: refused, changes nothing
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns after a refused LEDGER:\n got %+v\nwant %+v", got, want)
	}
	if n := agentMaps(t, first.name); n != 0 {
		t.Errorf("the replaced ledger is still mapped %d times", n)
	}
	if n := agentMaps(t, second.name); n != 1 {
		t.Fatalf("the second ledger is mapped %d times, want once", n)
	}
	a.stop()
	if n := agentMaps(t, second.name); n != 0 {
		t.Errorf("the ledger is still mapped %d times after the agent stopped", n)
	}
}

// The ledger of a process that exits is dropped (unmapped) when the agent
// next takes a LEDGER, lists or counts; its opened count stays in the
// totals.
func TestLedgerOfExitedProcessDropped(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLib(t, a)
	l := newTestLedger(t, 4)
	l.setOpened(3)
	l.put(0, 100, selfCli(48100), selfSrv)
	f := os.NewFile(uintptr(l.fd), l.name) // the child's fd 3; f owns the test's descriptor
	l.fd = -1
	child := startAsker(t, "", askSpec{Sock: a.cfg.LibrarySocket(), Ledger: true}, f)
	f.Close()
	want := []agentapi.ConnInfo{linkedEnd(selfCli(48100), selfSrv, "self")}
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("conns with the child's ledger:\n got %+v\nwant %+v", got, want)
	}
	if c := a.status().Connections; c.Shm != 3 || c.Live != 1 || c.ShmBytes != 100 {
		t.Fatalf("counters with the child's ledger: %+v; want opened 3, 1 live of 100 bytes", c)
	}
	child.finish() // the child exits; its entry stays live in the memfd
	// A LEDGER of this process (empty) drops the child's before anything lists.
	if err := cli.ledger(newTestLedger(t, 1).fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	if n := agentMaps(t, l.name); n != 0 {
		t.Errorf("the exited process's ledger is still mapped %d times after another LEDGER", n)
	}
	if got := a.connList(); len(got) != 0 {
		t.Errorf("conns after the child exited: %+v; want none", got)
	}
	if c := a.status().Connections; c.Shm != 3 || c.FastPath != 3 || c.Live != 0 || c.ShmBytes != 0 {
		t.Errorf("counters after the child exited: %+v; want opened 3 kept, nothing live", c)
	}
}

// A container whose ledger holds half its budget gets shm but no link;
// once the ledger's entry is freed (and the agent's channel closed), the
// next channel comes with a link. The budget is 6 channels, and each
// channel is charged twice (both ends are the same container): the
// ledger's 2 channels' worth plus this channel's 2 reach half.
func TestNoLinkAtHalfBudgetCountsLedger(t *testing.T) {
	a := shmAgent(t, fmt.Sprintf(`{"shm_budget": %d}`, 6*shmBytes))
	srv, cli := newLibCaps(t, a, capsLink), newLibCaps(t, a, capsLink)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	l := newTestLedger(t, 4)
	l.put(0, uint32(2*shmBytes), selfCli(48200), selfSrv)
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	con, acc := meetSelf(t, srv, cli, 48201)
	wantShmPair(t, con, acc)
	wantNoLink(t, "with the ledger at a third of the budget", con, acc)

	cli.closed(selfCli(48201), selfSrv)
	srv.closed(selfSrv, selfCli(48201))
	l.free(0)
	wantNoReplies(t, cli)
	wantNoReplies(t, srv)
	con, acc = meetSelf(t, srv, cli, 48202)
	wantLinkPair(t, con, acc)
}

// A channel is reserved only if its containers stay within their budget
// with what their ledgers hold.
func TestShmBudgetCountsLedger(t *testing.T) {
	a := shmAgent(t, fmt.Sprintf(`{"shm_budget": %d}`, 6*shmBytes))
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	l := newTestLedger(t, 4)
	l.put(0, uint32(5*shmBytes), selfCli(48300), selfSrv)
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	con, acc := meetSelf(t, srv, cli, 48301)
	if con.Kind != pathUnix || acc.Kind != pathUnix || con.Reason != reasonShmBudget || acc.Reason != reasonShmBudget {
		t.Errorf("with the ledger holding 5 of 6 channels: %+v, %+v; want unix shm-budget", con, acc)
	}
	l.free(0)
	con, acc = meetSelf(t, srv, cli, 48302)
	wantShmPair(t, con, acc)
}

// TestShmEntriesBeyondBudgetRefused: a container whose ledger lists more
// shm channels than its budget holds, each claiming no bytes (a lie), is
// over its budget: the agent stops reading there and reserves it nothing.
func TestShmEntriesBeyondBudgetRefused(t *testing.T) {
	a := shmAgent(t, fmt.Sprintf(`{"shm_budget": %d}`, 6*shmBytes))
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	l := newTestLedger(t, 8)
	for i := 0; i < 7; i++ {
		l.put(i, 0, selfCli(48500+i), selfSrv)
	}
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	con, acc := meetSelf(t, srv, cli, 48510)
	if con.Kind != pathUnix || acc.Kind != pathUnix || con.Reason != reasonShmBudget || acc.Reason != reasonShmBudget {
		t.Errorf("with the ledger listing 7 channels of a 6-channel budget: %+v, %+v; want unix shm-budget", con, acc)
	}
}

// TestLedgerReadWithoutConnTableLocked: a budget check reads a container's
// ledgers (its own memory, up to 1024 of 8 MiB) without the connection
// table locked, which every other container's answer needs.
func TestLedgerReadWithoutConnTableLocked(t *testing.T) {
	a := &Agent{ledgers: newLedgers(), live: newConnTable()}
	defer a.ledgers.close()
	l := newTestLedger(t, 4)
	l.put(0, uint32(shmBytes), selfCli(48600), selfSrv)
	if err := a.ledgers.put(int32(os.Getpid()), ffSelf, l.fd); err != nil {
		t.Fatal(err)
	}
	a.ledgers.mu.Lock() // the ledgers are being read, for as long as this test likes
	held := make(chan uint64)
	go func() { held <- a.untabledBytes(ffSelf.ID, DefaultShmBudget) }()
	waitInFunc(t, "agent.(*ledgers).read(")
	table := a.live.mu.TryLock()
	if table {
		a.live.mu.Unlock()
	}
	a.ledgers.mu.Unlock()
	if got := <-held; got != shmBytes {
		t.Errorf("untabled bytes %d; want %d", got, shmBytes)
	}
	if !table {
		t.Error("the connection table is locked while a budget check reads the ledgers")
	}
}

// waitInFunc waits until some goroutine's stack has fn in it.
func waitInFunc(t *testing.T, fn string) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for !strings.Contains(string(buf[:runtime.Stack(buf, true)]), fn) {
		runtime.Gosched()
	}
}

// TestLedgerSentAgainIsNoOp: a library sends its ledger again on a new
// session after one broke (the agent may have restarted); the same memfd
// from the same process is kept as it is: listed once, opened counted once,
// mapped once.
func TestLedgerSentAgainIsNoOp(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	cli := newLib(t, a)
	l := newTestLedger(t, 4)
	l.setOpened(3)
	l.put(0, 100, selfCli(48000), selfSrv)
	for i := 0; i < 2; i++ {
		if err := cli.ledger(l.fd); err != nil {
			t.Fatal(err)
		}
		wantNoReplies(t, cli)
	}
	if c := a.status().Connections; c.Shm != 3 || c.Live != 1 || c.ShmBytes != 100 {
		t.Errorf("counters after the same LEDGER twice: %+v; want opened 3, 1 live of 100 bytes", c)
	}
	if n := agentMaps(t, l.name); n != 1 {
		t.Errorf("the ledger is mapped %d times, want once", n)
	}
}

// A library lists what its agent answered in its ledger too: while the
// agent's table has the answer, the connection is listed and charged once;
// after CLOSED the ledger's entry stands for it, with the same listing and
// charge; once the entry is freed, nothing is left.
func TestLedgerAnsweredConnectionsListedOnce(t *testing.T) {
	a := shmAgent(t, "")
	srv, cli := newLibCaps(t, a, protocol.CapShm), newLibCaps(t, a, protocol.CapShm)
	if err := srv.listen(selfSrv); err != nil {
		t.Fatal(err)
	}
	con, acc := meetSelf(t, srv, cli, 48401)
	wantShmPair(t, con, acc)
	answered := a.connList()
	l := newTestLedger(t, 4)
	l.putAnswer(0, pathShm, uint32(shmBytes), selfCli(48401), selfSrv, "")
	l.putAnswer(1, pathShm, uint32(shmBytes), selfSrv, selfCli(48401), "")
	if err := cli.ledger(l.fd); err != nil {
		t.Fatal(err)
	}
	wantNoReplies(t, cli)
	if len(answered) != 2 {
		t.Fatalf("the agent lists %+v; want both shm ends", answered)
	}
	wantConns(t, a, "answered and in the ledger", answered, 2*shmBytes)

	cli.closed(selfCli(48401), selfSrv)
	srv.closed(selfSrv, selfCli(48401))
	wantNoReplies(t, cli)
	wantNoReplies(t, srv)
	if mine, _ := a.shm.charged(ffSelf.ID); mine != 0 {
		t.Fatalf("%d bytes still charged after CLOSED", mine)
	}
	wantConns(t, a, "after CLOSED, in the ledger only", answered, 2*shmBytes)

	l.free(0)
	l.free(1)
	wantConns(t, a, "after the ledger's entries were freed", []agentapi.ConnInfo{}, 0)
}

// TestLedgerVectors: the ledger lines of docs/protocol-vectors.txt (a
// one-slot ledger each, as the library's layout constants give it; the C
// vector test checks that) read as they say.
func TestLedgerVectors(t *testing.T) {
	b, err := os.ReadFile("../../docs/protocol-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || f[1] != "ledger" || strings.HasPrefix(f[0], "#") {
			continue
		}
		n++
		mem, err := hex.DecodeString(f[2])
		if err != nil || len(mem) != ledgerHeaderSize+ledgerEntrySize {
			t.Errorf("%s: %d bytes (%v); want a ledger of one slot", f[0], len(mem), err)
			continue
		}
		if err := checkLedgerHeader(mem); err != nil {
			t.Errorf("%s: %v", f[0], err)
			continue
		}
		e, ok := readEntry(mem, ledgerHeaderSize, false)
		if !ok {
			t.Errorf("%s: the entry is not read as live and valid", f[0])
			continue
		}
		ep := func(ap netip.AddrPort) []byte { return protocol.Endpoint(protocol.AttrLocalEndpoint, ap).Value }
		opened := (&ledger{mem: mem}).opened()
		got := fmt.Sprintf("opened=%d opened_tcp=%d no_library=%d used=%d seq=%d bytes=%d path=%d local=%x remote=%x fd=%d ino=%d reason=%s",
			opened.shm, opened.tcp, opened.noLibrary, (&ledger{mem: mem}).handedOut(), load32(mem, ledgerHeaderSize), e.bytes, e.path, ep(e.local), ep(e.remote), e.fd, e.sock, e.reason)
		if want := strings.Join(f[3:], " "); got != want {
			t.Errorf("%s: read\n %s\nwant %s", f[0], got, want)
		}
	}
	if n < 2 {
		t.Fatalf("%d ledger vectors; the file looks truncated", n)
	}
}

// TestLedgerLayoutVector: the ledger-layout line of
// docs/protocol-vectors.txt holds exactly ledger.go's layout constants, the
// ones the C vector test checks include/freeflow/ledger_layout.h against:
// no key is missing, unknown or different.
func TestLedgerLayoutVector(t *testing.T) {
	want := map[string]string{"magic": ledgerMagic}
	for k, v := range map[string]int{
		"version": ledgerVersion, "hdr": ledgerHeaderSize, "entry": ledgerEntrySize, "slots_max": ledgerMaxSlots,
		"off_version": ledgerOffVersion, "off_slots": ledgerOffSlots, "off_entry": ledgerOffEntry,
		"off_opened": ledgerOffOpened, "off_opened_tcp": ledgerOffOpenedTCP, "off_no_library": ledgerOffNoLibrary,
		"off_used": ledgerOffUsed, "off_used_kept": ledgerOffUsedKept, "e_seq": entryOffSeq, "e_bytes": entryOffBytes, "e_local_len": entryOffLocalLen, "e_remote_len": entryOffRemoteLen,
		"e_path": entryOffPath, "e_reason_len": entryOffReasonLen, "e_local": entryOffLocal, "e_remote": entryOffRemote,
		"e_reason": entryOffReason, "reason_max": entryMaxReason, "e_fd": entryOffFD, "e_ino": entryOffIno,
	} {
		want[k] = strconv.Itoa(v)
	}
	b, err := os.ReadFile("../../docs/protocol-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "ledger-layout" || f[1] != "layout" {
			continue
		}
		found = true
		seen := map[string]bool{}
		for _, kv := range f[3:] {
			k, v, _ := strings.Cut(kv, "=")
			seen[k] = true
			if w, ok := want[k]; !ok {
				t.Errorf("ledger-layout: key %s is not a constant of ledger.go", k)
			} else if v != w {
				t.Errorf("ledger-layout: %s, but ledger.go says %s", kv, w)
			}
		}
		for k := range want {
			if !seen[k] {
				t.Errorf("ledger-layout: no key %s, which ledger.go defines", k)
			}
		}
	}
	if !found {
		t.Fatal("no ledger-layout line in docs/protocol-vectors.txt")
	}
}

// TestLedgerReadSkipsUnwrittenPages: a read skips the pages never written,
// page by page, and still finds every entry that starts in a written one,
// also one that runs over into the next page.
func TestLedgerReadSkipsUnwrittenPages(t *testing.T) {
	l := newTestLedger(t, 4096)
	// 31 and 95 start in a page and end in the next; 160 is the first entry of
	// page 5, after unwritten page 4
	slots := []int{0, 31, 32, 95, 160, 1000, 4095}
	for i, s := range slots {
		l.put(s, uint32(i), selfCli(48700+i), selfSrv)
	}
	mem, _, err := mapLedger(l.fd)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	var got []uint32
	(&ledger{mem: mem}).read(true, func(e ledgerEntry) bool { got = append(got, e.bytes); return true })
	if len(got) != len(slots) {
		t.Fatalf("read %d entries %v; want %d, in slot order", len(got), got, len(slots))
	}
	for i, b := range got {
		if b != uint32(i) {
			t.Fatalf("read entries %v; want 0..%d in slot order", got, len(slots)-1)
		}
	}
}

// TestLedgerReadStopsAtEntriesHandedOut: the agent reads a ledger's entries
// only up to the count its header says were handed out (used), so a budget
// check on each new channel does not look at all 2048 pages; a ledger whose
// used is 0 with used_kept 1 (a process that has made no connection yet,
// such as a pre-forking server's master) is not read at all, and one whose
// used and used_kept are 0, from a library before the count, whole.
func TestLedgerReadStopsAtEntriesHandedOut(t *testing.T) {
	for _, tc := range []struct {
		used, kept uint32
		want       int
	}{{2, 0, 2}, {2, 1, 2}, {0, 0, 3}, {0, 1, 0}} {
		l := newTestLedger(t, 4096)
		for i, s := range []int{0, 1, 40} {
			l.put(s, uint32(i), selfCli(48700+i), selfSrv)
		}
		atomic.StoreUint32(l.word(ledgerOffUsed), tc.used) // slot 40 is past what the header says
		atomic.StoreUint32(l.word(ledgerOffUsedKept), tc.kept)
		mem, _, err := mapLedger(l.fd)
		if err != nil {
			t.Fatalf("used %d, used_kept %d: %v", tc.used, tc.kept, err)
		}
		n := 0
		(&ledger{mem: mem}).read(true, func(ledgerEntry) bool { n++; return true })
		unix.Munmap(mem)
		if n != tc.want {
			t.Errorf("used %d, used_kept %d: read %d entries, want %d", tc.used, tc.kept, n, tc.want)
		}
	}
}
