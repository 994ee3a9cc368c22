package agent

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

var (
	resumeSrv = directory.Container{ID: "s", Name: "s", IP: "10.244.1.2"}
	resumeCli = directory.Container{ID: "c", Name: "c", IP: "10.244.1.3"}
)

// movedDownEnd is a live moved-down entry of container c's process pid
// naming socket inode sock.
func movedDownEnd(c directory.Container, pid int32, local, remote string, sock uint64) ledgerEnd {
	return ledgerEnd{self: c, l: &ledger{self: c, pid: pid}, ledgerEntry: ledgerEntry{path: pathUnix, reason: reasonMovedDown,
		local: netip.MustParseAddrPort(local), remote: netip.MustParseAddrPort(remote), sock: sock}}
}

// parkedEnd is a live parked entry of container c's process pid naming
// socket inode sock.
func parkedEnd(c directory.Container, pid int32, local, remote string, sock uint64) ledgerEnd {
	e := movedDownEnd(c, pid, local, remote, sock)
	e.path, e.reason = pathOverlay, reasonParked
	return e
}

// soleHolders says each inode is held by the pid its ledgerEnd names.
func soleHolders(ends ...ledgerEnd) func(uint64) []int32 {
	m := map[uint64][]int32{}
	for _, e := range ends {
		m[e.sock] = append(m[e.sock], e.l.pid)
	}
	return func(ino uint64) []int32 { return m[ino] }
}

func everyoneWatches(watchKey, bool) bool { return true }

// wantSkipped checks that resumable found no pair and skipped one for a
// reason that says want.
func wantSkipped(t *testing.T, ends []ledgerEnd, holders func(uint64) []int32, watching func(watchKey, bool) bool, want string) {
	t.Helper()
	pairs, skipped := resumable(ends, holders, watching)
	if len(pairs) != 0 || len(skipped) != 1 {
		t.Fatalf("resumable: %d pairs, skipped %v; want none, one skipped for %q", len(pairs), skipped, want)
	}
	for why := range skipped {
		if !strings.Contains(why, want) {
			t.Fatalf("skipped for %q; want %q", why, want)
		}
	}
}

// TestResumePairsEndsByTupleConnectorSortingFirst: two moved-down ends
// whose tuples mirror each other are one connection, whichever ledger
// lists it first; the connector (ROLE 1) is the end whose local endpoint
// sorts first. A hostile container's entries at the same tuples count
// for nothing, neither as an end nor as a second entry.
func TestResumePairsEndsByTupleConnectorSortingFirst(t *testing.T) {
	evil := directory.Container{ID: "e", Name: "e", IP: "10.244.1.9"}
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	// A second connection whose acceptor's endpoint sorts first.
	srv2 := movedDownEnd(resumeCli, 21, "10.244.1.3:5432", "10.244.1.2:41000", 300)
	cli2 := movedDownEnd(resumeSrv, 11, "10.244.1.2:41000", "10.244.1.3:5432", 400)
	lies := []ledgerEnd{
		movedDownEnd(evil, 30, "10.244.1.2:6379", "10.244.1.3:40000", 500),
		movedDownEnd(evil, 30, "10.244.1.3:40000", "10.244.1.2:6379", 501),
	}
	ends := append([]ledgerEnd{cli, srv2, srv, cli2}, lies...)
	pairs, skipped := resumable(ends, soleHolders(ends...), everyoneWatches)
	if len(skipped) != 0 || len(pairs) != 2 {
		t.Fatalf("resumable: %+v, skipped %v; want both connections", pairs, skipped)
	}
	if p := pairs[0]; p.conn.l.pid != 10 || p.acc.l.pid != 20 {
		t.Errorf("first pair: connector %d, acceptor %d; want 10 (10.244.1.2:6379 sorts first), 20", p.conn.l.pid, p.acc.l.pid)
	}
	if p := pairs[1]; p.conn.l.pid != 11 || p.acc.l.pid != 21 || p.key() != (resumeKey{cli2.local, cli2.remote}) {
		t.Errorf("second pair: connector %d, acceptor %d; want 11 (10.244.1.2:41000 sorts first), 21", p.conn.l.pid, p.acc.l.pid)
	}
}

// TestResumeSkipsAPairStillHeldByTheForkChild: a redis-server's
// background save child holds the pair as long as it runs; until it
// exits, the socket has two holders and the connection stays a pair.
func TestResumeSkipsAPairStillHeldByTheForkChild(t *testing.T) {
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	child := movedDownEnd(resumeSrv, 12, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(srv, cli, child), everyoneWatches, "several processes")
	// The child exited: the parent alone holds it.
	if pairs, _ := resumable([]ledgerEnd{srv, cli}, soleHolders(srv, cli), everyoneWatches); len(pairs) != 1 {
		t.Fatalf("resumable once the child exited: %d pairs; want 1", len(pairs))
	}
	// The parent closed its copy, the child lives on (a postmaster's backend): its entry is stale.
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(child, cli), everyoneWatches, "no longer holds")
}

// TestResumeSkipsATupleWithTwoEntries: a fork child that used the
// connection lists it in a ledger of its own, and a tuple reused while
// the first connection lives has two entries too; the library finds its
// connection by the endpoints, so neither is resumed.
func TestResumeSkipsATupleWithTwoEntries(t *testing.T) {
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	child := movedDownEnd(resumeSrv, 12, "10.244.1.2:6379", "10.244.1.3:40000", 101)
	wantSkipped(t, []ledgerEnd{srv, cli, child}, soleHolders(srv, cli, child), everyoneWatches, "several live entries")
	reused := liveShmEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379")
	wantSkipped(t, []ledgerEnd{srv, cli, reused}, soleHolders(srv, cli), everyoneWatches, "several live entries")
}

// TestResumeSkipsAnEndWithoutAParkingThread: only a parking thread can
// take a RESUME; a process whose thread left (a library from before, or
// its session ended) keeps its pair, and so does its peer.
func TestResumeSkipsAnEndWithoutAParkingThread(t *testing.T) {
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	onlySrv := func(k watchKey, _ bool) bool { return k == watchKey{resumeSrv.ID, 10} }
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(srv, cli), onlySrv, "parking thread")
	// Another container's process of that pid does not stand in for it.
	otherContainer := func(k watchKey, _ bool) bool { return k.pid == 10 || k == watchKey{"x", 20} }
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(srv, cli), otherContainer, "parking thread")
}

// TestResumeSkipsAUnixPairNotMovedDown: a unix PATH the agent answered
// (no shm for it: lib-no-shm, shm-budget) never was on shm; it is no
// candidate, and neither is a moved-down end whose peer's end is such a
// pair, or that one process holds both ends of.
func TestResumeSkipsAUnixPairNotMovedDown(t *testing.T) {
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	srv.reason, cli.reason = reasonShmBudget, reasonShmBudget
	if pairs, skipped := resumable([]ledgerEnd{srv, cli}, soleHolders(srv, cli), everyoneWatches); len(pairs)+len(skipped) != 0 {
		t.Fatalf("resumable over a unix PATH: %d pairs, skipped %v; want nothing considered", len(pairs), skipped)
	}
	srv.reason = reasonMovedDown
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(srv, cli), everyoneWatches, "not off shm the same way")
	self := movedDownEnd(resumeSrv, 10, "10.244.1.2:41000", "10.244.1.2:6379", 300)
	self2 := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.2:41000", 301)
	wantSkipped(t, []ledgerEnd{self, self2}, soleHolders(self, self2), everyoneWatches, "one process holds both ends")
}

// TestResumeParkedEndsOnOneHost: a connection parked on TCP for a
// migration whose two ends are on this host again (one container moved
// back, or next to the other) is a pair to resume, as a moved-down one
// is; an overlay entry that was never on shm is not, nor a parked end
// whose peer's end is a socket pair, nor one whose library takes only a
// socket pair's RESUME (CAPS bit 4 without bit 5).
func TestResumeParkedEndsOnOneHost(t *testing.T) {
	srv := parkedEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := parkedEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	if pairs, skipped := resumable([]ledgerEnd{srv, cli}, soleHolders(srv, cli), everyoneWatches); len(pairs) != 1 || len(skipped) != 0 {
		t.Fatalf("resumable over two parked ends: %d pairs, skipped %v; want one", len(pairs), skipped)
	}
	plain := cli
	plain.reason = ""
	wantSkipped(t, []ledgerEnd{srv, plain}, soleHolders(srv, plain), everyoneWatches, "not off shm the same way")
	if pairs, skipped := resumable([]ledgerEnd{plain}, soleHolders(plain), everyoneWatches); len(pairs)+len(skipped) != 0 {
		t.Fatalf("resumable over an overlay entry: %d pairs, skipped %v; want nothing considered", len(pairs), skipped)
	}
	pair := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	wantSkipped(t, []ledgerEnd{srv, pair}, soleHolders(srv, pair), everyoneWatches, "not off shm the same way")
	pairsOnly := func(_ watchKey, parked bool) bool { return !parked }
	wantSkipped(t, []ledgerEnd{srv, cli}, soleHolders(srv, cli), pairsOnly, "parking thread")
	a := resumeAgent(t)
	s := watching(a, resumeSrv.ID, 10)
	if !a.watch.resumes(s.watching, false) || a.watch.resumes(s.watching, true) {
		t.Fatal("a library with CAPS bit 4 alone is taken for one that resumes parked connections, or not for pairs")
	}
	s.caps |= protocol.CapResumeParked
	if !a.watch.resumes(s.watching, true) {
		t.Fatal("a library with CAPS bits 4 and 5 is not taken for one that resumes parked connections")
	}
}

// TestResumeParkedHandsEachEndABell: a parked connection's RESUMEs carry
// the channel's memfd and one side each of a new bell (its TCP sockets
// close once it moved, so the channel needs its own); a socket pair's
// carry the memfd alone.
func TestResumeParkedHandsEachEndABell(t *testing.T) {
	a := resumeAgent(t)
	srv := parkedEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40002", 100)
	cli := parkedEnd(resumeCli, 20, "10.244.1.3:40002", "10.244.1.2:6379", 200)
	ss, cs := watching(a, resumeSrv.ID, 10), watching(a, resumeCli.ID, 20)
	done := make(chan [2]error, 1)
	go func() {
		done <- a.resumePair(context.Background(), resumePair{conn: srv, acc: cli}, directory.Settings{})
	}()
	var jobs [2]*parkJob
	for i, s := range []*session{ss, cs} {
		waitFor(t, "a job for the parking thread", func() bool { jobs[i] = a.watch.pop(s.watching, s); return jobs[i] != nil })
		defer protocol.CloseFDs(jobs[i].fds)
	}
	for i, j := range jobs {
		if len(j.fds) != 2 {
			t.Fatalf("end %d's RESUME carries %d fds; want the memfd and a bell", i, len(j.fds))
		}
		mustMapShm(t, j.fds[0])
		if typ, err := unix.GetsockoptInt(j.fds[1], unix.SOL_SOCKET, unix.SO_TYPE); err != nil || typ != unix.SOCK_STREAM {
			t.Fatalf("end %d's second fd: type %d, %v; want a Unix stream socket", i, typ, err)
		}
	}
	if _, err := unix.Write(jobs[0].fds[1], []byte{0x44}); err != nil {
		t.Fatal(err)
	}
	if b := make([]byte, 1); func() bool { n, err := unix.Read(jobs[1].fds[1], b); return n != 1 || err != nil }() {
		t.Fatal("the two ends' bells are not one socket pair")
	}
	jobs[0].done <- nil
	jobs[1].done <- nil
	if errs := <-done; errors.Join(errs[:]...) != nil {
		t.Fatal(errs)
	}
	fds, err := resumeFDs(false)
	if err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(append(fds[0], fds[1]...))
	if len(fds[0]) != 1 || len(fds[1]) != 1 {
		t.Fatalf("a socket pair's RESUMEs carry %d and %d fds; want the memfd alone", len(fds[0]), len(fds[1]))
	}
}

// TestResumeBackoffDoublesToAMinute: a connection not moved is tried
// again after 1 s, then 2, 4, ... 60 s at most; moved back or gone, it
// is forgotten, and starts from 1 s should it move down again.
func TestResumeBackoffDoublesToAMinute(t *testing.T) {
	b := resumeBackoff{}
	e := movedDownEnd(resumeSrv, 10, "10.244.1.3:40000", "10.244.1.2:6379", 100)
	k := resumeKeyOf(e.ledgerEntry)
	now := time.Unix(1000, 0)
	if !b.due(k, now) {
		t.Fatal("a connection never tried is not due")
	}
	for _, want := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60} {
		b.failed(k, now)
		if got := b[k].at.Sub(now); got != want*time.Second || b.due(k, now.Add(got-time.Millisecond)) || !b.due(k, now.Add(got)) {
			t.Fatalf("tried again after %v; want %v", got, want*time.Second)
		}
	}
	b.keep([]ledgerEnd{e})
	if len(b) != 1 {
		t.Fatal("a connection still moved down was forgotten")
	}
	e.path, e.reason = pathShm, ""
	b.keep([]ledgerEnd{e})
	b.failed(k, now)
	if len(b) != 1 || b[k].wait != time.Second {
		t.Fatalf("after it moved back and down again: retry in %v; want 1s", b[k].wait)
	}
}

// TestResumeMessageIsTheVector: RESUME carries the endpoints as the end
// sees them and its ROLE, exactly as the resume vector of
// docs/protocol-vectors.txt, which the C decoder checks too.
func TestResumeMessageIsTheVector(t *testing.T) {
	b, err := os.ReadFile("../../docs/protocol-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	var want []byte
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == "resume" && f[1] == "ok" {
			want, _ = hex.DecodeString(f[2])
		}
	}
	job := &parkJob{local: netip.MustParseAddrPort("10.244.1.3:40000"), remote: netip.MustParseAddrPort("10.244.1.2:6379"), role: protocol.RoleConnector}
	if got := encode(t, job.message(74)); want == nil || string(got) != string(want) {
		t.Fatalf("RESUME encodes as %x; the vector says %x", got, want)
	}
}

// TestResumeHandsOneMemfdOverWatch: a parking thread's WATCH is answered
// RESUME with one fd, the new channel's memfd laid out for the rings, and
// its next WATCH's FOUND 0 and REASON are the job's answer.
func TestResumeHandsOneMemfdOverWatch(t *testing.T) {
	a := startAgent(t, newFakeDir(ffSelf), nil)
	lib := newLib(t, a)
	mem, err := newShmMemfd(shmRingSize)
	if err != nil {
		t.Fatal(err)
	}
	job := &parkJob{local: netip.MustParseAddrPort(selfCli(48700)), remote: netip.MustParseAddrPort(selfSrv), fds: []int{mem},
		role: protocol.RoleAcceptor, done: make(chan error, 1)}
	a.watch.push(watchKey{ffSelf.ID, int32(os.Getpid())}, job)
	m, fds, err := lib.call(protocol.New(protocol.TypeWatch, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer protocol.CloseFDs(fds)
	role, _ := m.U8(protocol.AttrRole)
	local, _ := m.Endpoint(protocol.AttrLocalEndpoint)
	remote, _ := m.Endpoint(protocol.AttrRemoteEndpoint)
	if m.Type != protocol.TypeResume || role != protocol.RoleAcceptor || local != job.local || remote != job.remote || len(fds) != 1 {
		t.Fatalf("WATCH answered %v ROLE %d %v-%v with %d fds; want RESUME ROLE 2 %v-%v with one fd", m.Type, role, local, remote, len(fds), job.local, job.remote)
	}
	mustMapShm(t, fds[0]) // the resume word at 320 zero: a new channel's
	if err := lib.notify(protocol.New(protocol.TypeWatch, 0, protocol.Bool(protocol.AttrFound, false),
		protocol.Attr{Type: protocol.AttrReason, Value: []byte("not-quiet")})); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-job.done:
		if !errors.Is(err, errNotResumed) || !strings.Contains(err.Error(), "not-quiet") {
			t.Fatalf("the job's answer: %v; want not moved back, not-quiet", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the second WATCH did not answer the job")
	}
}

// resumeAgent is an agent of the parts resuming needs, the test process's
// namespace registered as ffSelf, the cluster settings read.
func resumeAgent(t *testing.T) *Agent {
	t.Helper()
	a := &Agent{ids: newIdentities(), watch: newWatchers(), shm: newShmBudget(), live: newConnTable(), ledgers: newLedgers(),
		held: map[string]time.Time{}, parkedFor: map[string]time.Time{}, log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	t.Cleanup(a.ledgers.close)
	a.set.Store(&directory.Settings{})
	k, err := nsOfPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	a.ids.put(ffSelf, k)
	return a
}

// watching attaches a parking thread for container id's process pid and
// returns its session.
func watching(a *Agent, id string, pid int32) *session {
	s := &session{pid: pid, self: directory.Container{ID: id}, caps: protocol.CapResume}
	a.watch.attach(watchKey{id, pid}, s)
	return s
}

// takeJob waits for s's next job, and closes its fds as a session does
// once it handed it.
func takeJob(t *testing.T, a *Agent, s *session) *parkJob {
	t.Helper()
	var job *parkJob
	waitFor(t, "a job for the parking thread", func() bool { job = a.watch.pop(s.watching, s); return job != nil })
	protocol.CloseFDs(job.fds)
	return job
}

// TestResumeChargesLikeANewChannel: the channel is charged to both
// containers while the RESUMEs are out, both at once; an end that moved
// keeps its charge on the table's entry for it (the account of the
// agent's answer, whose charge went when it moved down), as a PATH shm's
// end does until CLOSED; an end the table has no entry for is counted
// from its ledger entry, and one not moved holds nothing.
func TestResumeChargesLikeANewChannel(t *testing.T) {
	a := resumeAgent(t)
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	a.live.add(resumeSrv.ID, 10, srv.local, srv.remote, agentapi.ConnInfo{Path: "unix", Reason: reasonMovedDown}, nil)
	ss, cs := watching(a, resumeSrv.ID, 10), watching(a, resumeCli.ID, 20)
	done := make(chan error, 1)
	go func() {
		errs := a.resumePair(context.Background(), resumePair{conn: srv, acc: cli}, directory.Settings{})
		done <- errors.Join(errs[:]...)
	}()
	sj, cj := takeJob(t, a, ss), takeJob(t, a, cs) // both out before either answers
	if sj.role != protocol.RoleConnector || cj.role != protocol.RoleAcceptor || sj.local != srv.local || cj.local != cli.local {
		t.Fatalf("RESUMEs: %v ROLE %d, %v ROLE %d; want the server's end the connector", sj.local, sj.role, cj.local, cj.role)
	}
	for _, c := range []directory.Container{resumeSrv, resumeCli} {
		if mine, _ := a.shm.charged(c.ID); mine != shmChannelBytes {
			t.Errorf("container %s charged %d while the RESUMEs are out; want one channel, %d", c.ID, mine, shmChannelBytes)
		}
	}
	sj.done <- nil
	cj.done <- nil
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if mine, _ := a.shm.charged(resumeSrv.ID); mine != shmChannelBytes || a.live.m[srv.key()].info.Path != "shm" {
		t.Errorf("the server's end: %d charged, listed %q; want its charge on its table entry, shm", mine, a.live.m[srv.key()].info.Path)
	}
	if mine, _ := a.shm.charged(resumeCli.ID); mine != 0 {
		t.Errorf("the client's end, in no table entry, still charged %d; its ledger entry counts for it", mine)
	}
	// Moved down again: the table's entry follows its ledger entry and the charge goes.
	a.live.reconcile([]ledgerEnd{srv}, nil)
	if mine, _ := a.shm.charged(resumeSrv.ID); mine != 0 {
		t.Errorf("moved down again, the server's end is still charged %d", mine)
	}
}

// TestResumeNotMovedHoldsNothing: an end that answers FOUND 0, and one
// whose parking thread never takes its RESUME (withdrawn after
// resumeTake, its memfd closed), leave no charge and no descriptor behind.
func TestResumeNotMovedHoldsNothing(t *testing.T) {
	a := resumeAgent(t)
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40001", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40001", "10.244.1.2:6379", 200)
	ss := watching(a, resumeSrv.ID, 10)
	before := openFDs(t, "freeflow-shm")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		errs := a.resumePair(ctx, resumePair{conn: srv, acc: cli}, directory.Settings{})
		done <- errors.Join(errs[:]...)
	}()
	takeJob(t, a, ss).done <- errNotResumed
	err := <-done
	if !errors.Is(err, errNotResumed) || !strings.Contains(err.Error(), "process 20") {
		t.Fatalf("resumePair: %v; want the connector's refusal and the acceptor's silence", err)
	}
	for _, c := range []directory.Container{resumeSrv, resumeCli} {
		if mine, _ := a.shm.charged(c.ID); mine != 0 {
			t.Errorf("container %s still charged %d", c.ID, mine)
		}
	}
	if n := openFDs(t, "freeflow-shm"); n != before {
		t.Errorf("%d channel memfds open, %d before: the withdrawn RESUME's was not closed", n, before)
	}
	if x := a.watch.m[watchKey{resumeCli.ID, 20}]; x != nil && len(x.queue) != 0 {
		t.Error("the acceptor's RESUME is still queued")
	}
}

// TestResumeCountsTheForkChildAsASecondHolder: a child that inherited a
// pair's socket holds it as long as it lives, as /proc shows; the holders
// are looked for among the processes of the containers' namespaces.
func TestResumeCountsTheForkChildAsASecondHolder(t *testing.T) {
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(pair[0])
	defer closeFD(pair[1])
	var st unix.Stat_t
	if err := unix.Fstat(pair[0], &st); err != nil {
		t.Fatal(err)
	}
	self, err := nsOfPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	nss, inos := map[nsKey]bool{self: true}, map[uint64]bool{st.Ino: true}
	if got := holdersIn(nss, inos)[st.Ino]; len(got) != 1 || got[0] != int32(os.Getpid()) {
		t.Fatalf("holders of a socket of this process alone: %v", got)
	}
	dup, err := dupFD(pair[0])
	if err != nil {
		t.Fatal(err)
	}
	inherited := os.NewFile(uintptr(dup), "pair")
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{inherited}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	inherited.Close()
	defer func() { child.Process.Kill(); child.Wait() }()
	if got := holdersIn(nss, inos)[st.Ino]; len(got) != 2 {
		t.Fatalf("holders with the child running: %v; want this process and the child", got)
	}
	if got := holdersIn(map[nsKey]bool{}, inos)[st.Ino]; len(got) != 0 {
		t.Fatalf("holders in no namespace: %v", got)
	}
	child.Process.Kill()
	child.Wait()
	if got := holdersIn(nss, inos)[st.Ino]; len(got) != 1 {
		t.Fatalf("holders once the child exited: %v; want this process alone", got)
	}
}

// TestResumeNeverRunsWhileAMoveParks: the tick takes the parking lock
// only when it is free and no PARK_CONTAINER waits for it, so a move
// never waits behind a resume it did not find under way; nor does it
// resume a container whose connections a move parked until its RELEASE
// (the move's next step: before, a tick between the two put them back on
// shm, and the move found the new bells in its way), or the move called
// off; otherwise it finds a connection inside one container (two
// processes) and resumes it.
func TestResumeNeverRunsWhileAMoveParks(t *testing.T) {
	a := resumeAgent(t)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer closeFD(pair[0])
	mine, its := newTestLedger(t, 4), newTestLedger(t, 4)
	mine.putHeld(t, 0, pathUnix, 0, selfSrv, selfCli(48701), reasonMovedDown, pair[0])
	its.putHeld(t, 0, pathUnix, 0, selfCli(48701), selfSrv, reasonMovedDown, pair[1])
	binary.NativeEndian.PutUint32(its.mem[entryOff(0)+entryOffFD:], 3) // where the child holds it
	held := os.NewFile(uintptr(pair[1]), "pair")
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{held} // its fd 3; this process keeps pair[0] only
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	held.Close()
	defer func() { child.Process.Kill(); child.Wait() }()
	me, kid := int32(os.Getpid()), int32(child.Process.Pid)
	for pid, l := range map[int32]*testLedger{me: mine, kid: its} {
		if err := a.ledgers.put(pid, ffSelf, l.fd); err != nil {
			t.Fatal(err)
		}
	}
	sMe, sKid := watching(a, ffSelf.ID, me), watching(a, ffSelf.ID, kid)
	backoff := resumeBackoff{}

	a.watch.parking.Lock() // a move parks
	a.resumeTick(context.Background(), backoff, false)
	a.watch.parking.Unlock()
	a.watch.moves.Add(1) // a move waits for the lock
	a.resumeTick(context.Background(), backoff, false)
	a.watch.moves.Add(-1)
	a.parkedFor[ffSelf.ID] = time.Now().Add(parkedHold) // a move parked it, its RELEASE to come
	a.resumeTick(context.Background(), backoff, false)
	// A RESUME not taken is withdrawn after resumeTake, and its process backed off.
	if a.watch.pop(sMe.watching, sMe) != nil || a.watch.pop(sKid.watching, sKid) != nil || len(backoff) != 0 {
		t.Fatalf("a RESUME was offered while a move parked, waited to, or had parked the container (backoff %+v)", backoff)
	}
	a.verbs = newVerbsRegistry(1, 1, func() int { return 1 })
	if err := a.release(ffSelf.ID, time.Time{}); err != nil || a.releasing(ffSelf.ID) { // the move called off
		t.Fatalf("after the move was called off: %v, still held %v", err, a.releasing(ffSelf.ID))
	}

	done := make(chan struct{})
	go func() { a.resumeTick(context.Background(), backoff, false); close(done) }()
	mj, kj := takeJob(t, a, sMe), takeJob(t, a, sKid)
	if mj.role != protocol.RoleConnector || kj.role != protocol.RoleAcceptor {
		t.Fatalf("roles: this process %d, the child %d; want 1 (%s sorts first), 2", mj.role, kj.role, selfSrv)
	}
	if a.watch.parking.TryLock() {
		t.Fatal("the parking lock is free while a RESUME pair is out")
	}
	mj.done <- nil
	kj.done <- errNotResumed
	<-done
	if r, ok := backoff[resumeKey{netip.MustParseAddrPort(selfSrv), netip.MustParseAddrPort(selfCli(48701))}]; !ok || r.wait != resumeFirstRetry {
		t.Fatalf("backoff after a pair not moved: %+v; want a retry in 1s", backoff)
	}
}

func TestResumeSkipsALibraryThatDoesNotTakeResume(t *testing.T) {
	w := newWatchers()
	old := &session{pid: 10, self: directory.Container{ID: "c-1"}, caps: protocol.CapShm | protocol.CapLink}
	w.attach(watchKey{"c-1", 10}, old)
	if !w.known(watchKey{"c-1", 10}) || w.resumes(watchKey{"c-1", 10}, false) {
		t.Fatalf("a parking thread without CAPS bit 4: known %v, takes RESUME %v; want true, false",
			w.known(watchKey{"c-1", 10}), w.resumes(watchKey{"c-1", 10}, false))
	}
	w.attach(watchKey{"c-1", 10}, &session{pid: 10, self: directory.Container{ID: "c-1"}, caps: protocol.CapResume})
	if !w.resumes(watchKey{"c-1", 10}, false) {
		t.Fatal("its newer session says it takes RESUME, and it is not asked")
	}
}

// forkedPairs lists a moved-down socket pair for each port, one end in a
// ledger of this process (at selfSrv, the connector), the other in one of
// a child that holds it (its fds 3, 4, ...), as the agent a reads them;
// it returns both pids.
func forkedPairs(t *testing.T, a *Agent, ports ...int) (me, kid int32) {
	t.Helper()
	mine, its := newTestLedger(t, 4), newTestLedger(t, 4)
	var held []*os.File
	for i, port := range ports {
		pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { closeFD(pair[0]) })
		mine.putHeld(t, i, pathUnix, 0, selfSrv, selfCli(port), reasonMovedDown, pair[0])
		its.putHeld(t, i, pathUnix, 0, selfCli(port), selfSrv, reasonMovedDown, pair[1])
		binary.NativeEndian.PutUint32(its.mem[entryOff(i)+entryOffFD:], uint32(3+i))
		held = append(held, os.NewFile(uintptr(pair[1]), "pair"))
	}
	child := exec.Command("sleep", "60")
	child.ExtraFiles = held
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	for _, f := range held {
		f.Close()
	}
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	me, kid = int32(os.Getpid()), int32(child.Process.Pid)
	for pid, l := range map[int32]*testLedger{me: mine, kid: its} {
		if err := a.ledgers.put(pid, ffSelf, l.fd); err != nil {
			t.Fatal(err)
		}
	}
	return me, kid
}

// wantNothingHeld checks that no RESUME is queued for the processes, no
// channel memfd is open beyond before, and no container is charged.
func wantNothingHeld(t *testing.T, a *Agent, before int, procs ...watchKey) {
	t.Helper()
	for _, k := range procs {
		if x := a.watch.m[k]; x != nil && len(x.queue) != 0 {
			t.Errorf("%d RESUMEs still queued for process %d", len(x.queue), k.pid)
		}
	}
	if n := openFDs(t, "freeflow-shm"); n != before {
		t.Errorf("%d channel memfds open, %d before: a withdrawn RESUME's was not closed", n, before)
	}
	if mine, _ := a.shm.charged(ffSelf.ID); mine != 0 {
		t.Errorf("container %s still charged %d", ffSelf.ID, mine)
	}
}

// TestResumeWithdrawsFromAFrozenProcess: parking threads that never take
// their RESUMEs (stopped, frozen, hostile) cost a tick resumeTake, not
// resumeWait: both RESUMEs are withdrawn, their memfds closed, no charge
// is held, and both processes back off with all their pairs, the ones not
// tried yet too, in that tick and the next. Once due again, a process
// that takes its RESUME is forgiven.
func TestResumeWithdrawsFromAFrozenProcess(t *testing.T) {
	a := resumeAgent(t)
	me, kid := forkedPairs(t, a, 48710, 48711)
	kMe, kKid := watchKey{ffSelf.ID, me}, watchKey{ffSelf.ID, kid}
	sMe, sKid := watching(a, ffSelf.ID, me), watching(a, ffSelf.ID, kid) // they never take a job
	first := resumeKey{netip.MustParseAddrPort(selfSrv), netip.MustParseAddrPort(selfCli(48710))}
	second := resumeKey{netip.MustParseAddrPort(selfSrv), netip.MustParseAddrPort(selfCli(48711))}
	before := openFDs(t, "freeflow-shm")
	backoff := resumeBackoff{}

	start := time.Now()
	a.resumeTick(context.Background(), backoff, false)
	if took := time.Since(start); took < resumeTake || took > resumeEvery/2 {
		t.Errorf("the tick took %v; want about resumeTake (%v)", took, resumeTake)
	}
	wantNothingHeld(t, a, before, kMe, kKid)
	for _, k := range []watchKey{kMe, kKid} {
		if r := backoff[k]; r.wait != resumeFirstRetry {
			t.Errorf("process %d: %+v; want it left alone for %v", k.pid, r, resumeFirstRetry)
		}
	}
	if backoff[first].wait != resumeFirstRetry || !backoff[second].tried.IsZero() {
		t.Errorf("pairs: first %+v, second %+v; want the first tried and backing off, the second (same processes) not tried", backoff[first], backoff[second])
	}

	a.resumeTick(context.Background(), backoff, false)
	if !backoff[second].tried.IsZero() || backoff[kMe].wait != resumeFirstRetry {
		t.Errorf("the next tick tried a pair of a process backing off: %+v", backoff)
	}

	// Due again, and taking its RESUMEs: the second pair is tried (the
	// first still backs off), both processes answer and are forgiven.
	for _, k := range []watchKey{kMe, kKid} {
		r := backoff[k]
		r.at = time.Now().Add(-time.Millisecond)
		backoff[k] = r
	}
	done := make(chan struct{})
	go func() { a.resumeTick(context.Background(), backoff, false); close(done) }()
	mj, kj := takeJob(t, a, sMe), takeJob(t, a, sKid)
	if mj.remote != netip.MustParseAddrPort(selfCli(48711)) {
		t.Fatalf("RESUME for %v; want the pair not tried yet", mj.remote)
	}
	mj.done <- errNotResumed
	kj.done <- errNotResumed
	<-done
	_, meOff := backoff[kMe]
	_, kidOff := backoff[kKid]
	if meOff || kidOff || backoff[second].wait != resumeFirstRetry {
		t.Errorf("after both took and answered FOUND 0: processes backing off %v %v, the pair %+v; want the processes forgiven, the pair backing off",
			meOff, kidOff, backoff[second])
	}
}

// TestResumeBacksOffOnlyTheProcessThatDidNotTake: of a pair whose one end
// takes its RESUME and answers while the other's thread never takes its
// own, only the second's process backs off; the first's answer (FOUND 0:
// its peer never came) is awaited, and the connection backs off as a
// pair not moved does.
func TestResumeBacksOffOnlyTheProcessThatDidNotTake(t *testing.T) {
	a := resumeAgent(t)
	me, kid := forkedPairs(t, a, 48712)
	kMe, kKid := watchKey{ffSelf.ID, me}, watchKey{ffSelf.ID, kid}
	sMe := watching(a, ffSelf.ID, me)
	watching(a, ffSelf.ID, kid) // never takes a job
	before := openFDs(t, "freeflow-shm")
	backoff := resumeBackoff{}
	done := make(chan struct{})
	go func() { a.resumeTick(context.Background(), backoff, false); close(done) }()
	takeJob(t, a, sMe).done <- errNotResumed
	<-done
	wantNothingHeld(t, a, before, kMe, kKid)
	if _, ok := backoff[kMe]; ok {
		t.Errorf("the process that took its RESUME and answered backs off: %+v", backoff[kMe])
	}
	if backoff[kKid].wait != resumeFirstRetry {
		t.Errorf("the process that did not take its RESUME: %+v; want it left alone for %v", backoff[kKid], resumeFirstRetry)
	}
	if k := (resumeKey{netip.MustParseAddrPort(selfSrv), netip.MustParseAddrPort(selfCli(48712))}); backoff[k].wait != resumeFirstRetry {
		t.Errorf("the pair: %+v; want it tried again after %v", backoff[k], resumeFirstRetry)
	}
}

// TestResumeTriesLeastRecentlyTriedFirst: the pairs whose containers were
// tried longest ago go first, then among those the connection tried
// longest ago; so a container with many pairs (or one that names new ones
// every time, a new port each) takes turns with the others, and its own
// pairs take turns among themselves.
func TestResumeTriesLeastRecentlyTriedFirst(t *testing.T) {
	x1 := directory.Container{ID: "x1", Name: "x1", IP: "10.244.1.4"}
	x2 := directory.Container{ID: "x2", Name: "x2", IP: "10.244.1.5"}
	pair := func(c, a directory.Container, port int) resumePair {
		return resumePair{conn: movedDownEnd(c, 10, c.IP+":6379", a.IP+":"+strconv.Itoa(port), 0),
			acc: movedDownEnd(a, 20, a.IP+":"+strconv.Itoa(port), c.IP+":6379", 0)}
	}
	// x1 and x2 have many pairs, sorting first; resumeSrv and resumeCli one.
	xs := []resumePair{pair(x1, x2, 40000), pair(x1, x2, 40001), pair(x1, x2, 40002)}
	y := pair(resumeSrv, resumeCli, 40000)
	b := resumeBackoff{}
	t0 := time.Unix(1000, 0)
	var order []resumeKey
	for round := range 7 { // each tick has time for one pair
		pairs := append(slices.Clone(xs), y)
		b.order(pairs)
		b.tried(pairs[0], t0.Add(time.Duration(round)*time.Second))
		order = append(order, pairs[0].key())
	}
	want := []resumeKey{xs[0].key(), y.key(), xs[1].key(), y.key(), xs[2].key(), y.key(), xs[0].key()}
	if !slices.Equal(order, want) {
		t.Fatalf("tried %v;\nwant %v", order, want)
	}
	// x's containers were tried last: a pair they name anew (a fresh port,
	// never tried) waits for y's turn all the same.
	pairs := []resumePair{pair(x1, x2, 40003), y}
	b.order(pairs)
	if pairs[0].key() != y.key() {
		t.Fatalf("a new pair of containers tried last goes before one whose containers were tried longer ago")
	}
}

// TestResumeBackoffForgetsProcessesWithNoMovedDownEntry: what is kept of a
// process and a container goes once neither has a moved-down entry; a
// process left alone is tried again on the same schedule as a connection.
func TestResumeBackoffForgetsProcessesWithNoMovedDownEntry(t *testing.T) {
	b := resumeBackoff{}
	srv := movedDownEnd(resumeSrv, 10, "10.244.1.2:6379", "10.244.1.3:40000", 100)
	cli := movedDownEnd(resumeCli, 20, "10.244.1.3:40000", "10.244.1.2:6379", 200)
	now := time.Unix(1000, 0)
	b.tried(resumePair{conn: srv, acc: cli}, now)
	for _, want := range []time.Duration{1, 2, 4, 8, 16, 32, 60, 60} {
		b.failed(srv.proc(), now)
		if got := b[srv.proc()].at.Sub(now); got != want*time.Second || b.due(srv.proc(), now.Add(got-time.Millisecond)) {
			t.Fatalf("process tried again after %v; want %v", got, want*time.Second)
		}
	}
	b.keep([]ledgerEnd{srv, cli})
	if len(b) != 4 { // the connection, the process backing off, two containers
		t.Fatalf("kept %v while both ends are moved down", b)
	}
	srv.path, srv.reason = pathShm, ""
	b.keep([]ledgerEnd{srv, cli})
	if _, ok := b[srv.proc()]; ok || len(b) != 2 {
		t.Fatalf("kept %v once the server's end is on shm; want its process and container forgotten", b)
	}
	cli.path, cli.reason = pathShm, ""
	if b.keep([]ledgerEnd{srv, cli}); len(b) != 0 {
		t.Fatalf("kept %v once neither end is moved down", b)
	}
}

// TestResumeFindsParkedEndsRestoredUnderOtherInodes: a container moved
// back next to its peer holds its parked sockets under other inodes than
// its ledger names (CRIU made them anew at the restore): each end is
// checked against the socket at its descriptor, as conns checks them, and
// the connection is a pair to resume (before, its ends were taken for
// sockets their processes no longer held, until a conns listing looked).
func TestResumeFindsParkedEndsRestoredUnderOtherInodes(t *testing.T) {
	a := resumeAgent(t)
	restoredParkedPair(t, a)
	ends := a.resumeEnds()
	if pairs, skipped := resumable(ends, a.socketHolders(ends), everyoneWatches); len(pairs) != 1 {
		t.Fatalf("resumable over two restored parked ends: %d pairs, skipped %v; want one", len(pairs), skipped)
	}
}

// loopbackContainer registers container "lo" at 127.0.0.1 in this
// process's namespace, and returns it and a listener there.
func loopbackContainer(t *testing.T, a *Agent) (directory.Container, net.Listener) {
	t.Helper()
	lo := directory.Container{ID: "lo", Name: "lo", IP: "127.0.0.1"}
	k, err := nsOfPath("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	a.ids.put(lo, k)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return lo, ln
}

// restoredParkedPair lists a parked connection of container "lo"
// (127.0.0.1), one end in a ledger of this process, the other in one of a
// child that holds it (its fd 3), each under an inode its socket does not
// have (as before a CRIU restore); it returns both pids.
func restoredParkedPair(t *testing.T, a *Agent) (me, kid int32) {
	t.Helper()
	lo, ln := loopbackContainer(t, a)
	conn, err := net.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	accepted, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	mineF, err := conn.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { mineF.Close() })
	itsF, err := accepted.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	local, remote := conn.LocalAddr().String(), conn.RemoteAddr().String()
	conn.Close()
	accepted.Close()
	child := exec.Command("sleep", "60")
	child.ExtraFiles = []*os.File{itsF} // its fd 3: the peer's end, its process's alone
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	itsF.Close()
	t.Cleanup(func() { child.Process.Kill(); child.Wait() })
	mine, its := newTestLedger(t, 4), newTestLedger(t, 4)
	mine.putHeld(t, 0, pathOverlay, 0, local, remote, reasonParked, int(mineF.Fd()))
	its.putHeld(t, 0, pathOverlay, 0, remote, local, reasonParked, int(mineF.Fd()))
	binary.NativeEndian.PutUint32(its.mem[entryOff(0)+entryOffFD:], 3)
	for i, l := range []*testLedger{mine, its} { // as written before the restore
		binary.NativeEndian.PutUint64(l.mem[entryOff(0)+entryOffIno:], 1<<40+uint64(i))
	}
	me, kid = int32(os.Getpid()), int32(child.Process.Pid)
	for pid, l := range map[int32]*testLedger{me: mine, kid: its} {
		if err := a.ledgers.put(pid, lo, l.fd); err != nil {
			t.Fatal(err)
		}
	}
	return me, kid
}

// TestResumeLookDoesNotStandForTheBudgetCheck: the resume tick checks the
// entries at its tuples every second against the sockets their processes
// hold; that is not a check of the ledger's other entries, so the budget
// check (reconciled, at most every ledgerCheckEvery) still finds an shm
// entry whose socket its process closed behind the library (before, the
// tick marked the whole ledger checked, and the dead entry stayed charged).
func TestResumeLookDoesNotStandForTheBudgetCheck(t *testing.T) {
	a := resumeAgent(t)
	lo, ln := loopbackContainer(t, a)
	socket := func() (*net.TCPConn, *os.File) {
		conn, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		acc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { acc.Close() })
		f, err := conn.(*net.TCPConn).File()
		if err != nil {
			t.Fatal(err)
		}
		return conn.(*net.TCPConn), f
	}
	parkedConn, parkedF := socket()
	defer parkedConn.Close()
	defer parkedF.Close()
	goneConn, goneF := socket()
	l := newTestLedger(t, 4)
	l.putHeld(t, 0, pathOverlay, 0, parkedConn.LocalAddr().String(), parkedConn.RemoteAddr().String(), reasonParked, int(parkedF.Fd()))
	l.putHeld(t, 1, pathShm, 1<<20, "127.0.0.1:5555", "127.0.0.1:6666", "", int(goneF.Fd()))
	goneF.Close() // closed behind the library
	goneConn.Close()
	if err := a.ledgers.put(int32(os.Getpid()), lo, l.fd); err != nil {
		t.Fatal(err)
	}
	a.resumeEnds()
	for _, e := range a.reconciled(lo.ID, ledgerCheckEvery) {
		if e.path == pathShm {
			t.Fatalf("the budget check right after a resume tick takes the closed shm entry %v-%v as live", e.local, e.remote)
		}
	}
}

// TestResumeLooksWhenAParkingThreadArrives: a process's parking thread
// that comes with a new session (a restored process's, back after its
// move) makes the agent look at once for parked connections, not at its
// next tick: with a ticker that never fires, a parked pair is resumed
// once the second end's thread arrives, and not before (only one end
// could take a RESUME).
// Before, a move back brought its connections onto shm up to a second
// after the restore.
func TestResumeLooksWhenAParkingThreadArrives(t *testing.T) {
	a := resumeAgent(t)
	me, kid := restoredParkedPair(t, a)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { a.resumeOn(ctx, nil); close(done) }()
	defer func() { cancel(); <-done }()
	sMe := watching(a, "lo", me)
	sMe.caps |= protocol.CapResumeParked
	time.Sleep(100 * time.Millisecond) // a look: the child's end has no parking thread yet
	if a.watch.pop(sMe.watching, sMe) != nil {
		t.Fatal("a RESUME was handed while one end had no parking thread")
	}
	sKid := &session{pid: kid, self: directory.Container{ID: "lo"}, caps: protocol.CapResume | protocol.CapResumeParked}
	a.watch.attach(watchKey{"lo", kid}, sKid) // the child's thread arrives
	mj, kj := takeJob(t, a, sMe), takeJob(t, a, sKid)
	mj.done <- nil
	kj.done <- nil
}
