package agent

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/freeflow-net/freeflow/internal/agentapi"
)

// holdLedgerChild is a process that only holds what it inherited (its fd 3: a
// ledger) until its stdin closes, and never talks to the agent.
func holdLedgerChild() int {
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin)
	return 0
}

// holdInNetns runs holdLedgerChild in network namespace ns with l's memfd as
// its fd 3, and returns once it runs there.
func holdInNetns(t *testing.T, ns string, l *testLedger) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", ns, exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), envChild+"=hold-ledger")
	cmd.Stderr = os.Stderr
	dup, err := unix.FcntlInt(uintptr(l.fd), unix.F_DUPFD_CLOEXEC, 0) // the File owns and closes its fd
	if err != nil {
		t.Fatal(err)
	}
	held := os.NewFile(uintptr(dup), l.name)
	defer held.Close()
	cmd.ExtraFiles = []*os.File{held}
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Wait() })
	if line, err := bufio.NewReader(stdout).ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("holder in netns %s: %q, %v", ns, line, err)
	}
}

// libraryLedger is a ledger as the library names it, with the ends of
// container web (10.244.1.2) that an agent answered or a link decided.
func libraryLedger(t *testing.T) *testLedger {
	l := newNamedLedger(t, "freeflow-ledger", ledgerHeaderSize+8*ledgerEntrySize, 8, sealsAll)
	l.putAnswer(0, pathShm, uint32(shmBytes), "10.244.1.2:40001", neighbour.IP+":9000", "")
	l.putAnswer(1, pathUnix, 0, "10.244.1.2:40002", neighbour.IP+":9000", reasonShmBudget)
	l.putAnswer(2, pathHostTCP, 0, "10.244.1.2:40003", remoteContainer.IP+":5432", "")
	l.putAnswer(3, pathOverlay, 0, "10.244.1.2:40004", "10.244.1.77:80", "tenant-differs")
	return l
}

// wantWebEnds checks that a lists exactly the ends of libraryLedger, less
// those freed, and counts them.
func wantWebEnds(t *testing.T, a *testAgent, freed int) {
	t.Helper()
	end := func(port int, remote, rc, path, reason string) agentapi.ConnInfo {
		return agentapi.ConnInfo{Local: fmt.Sprintf("10.244.1.2:%d", port), Remote: remote, LocalContainer: "web",
			RemoteContainer: rc, Path: path, Reason: reason}
	}
	want := []agentapi.ConnInfo{
		end(40001, neighbour.IP+":9000", "neighbour", "shm", ""),
		end(40002, neighbour.IP+":9000", "neighbour", "unix", reasonShmBudget),
		end(40003, remoteContainer.IP+":5432", remoteContainer.Name, "host-tcp", ""),
		end(40004, "10.244.1.77:80", "", "overlay", "tenant-differs"),
	}[freed:]
	if got := a.connList(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("conns:\n got %+v\nwant %+v", got, want)
	}
	bytes := shmBytes
	if freed > 0 {
		bytes = 0
	}
	if c := a.status().Connections; c.Live != len(want) || c.ShmBytes != bytes {
		t.Errorf("%d live, %d shm bytes; want %d, %d", c.Live, c.ShmBytes, len(want), bytes)
	}
}

// TestRestartedAgentFindsLedgers: an agent that starts while processes of
// its containers hold ledgers (it restarted; they never talk to it) lists
// their connections and counts their shm at once, from the ledgers it
// finds itself; not those of a namespace that is no container's, nor a
// memfd that only has a ledger's name.
func TestRestartedAgentFindsLedgers(t *testing.T) {
	needRoot(t, "ip")
	nsWeb, nsOther := makeNetns(t), makeNetns(t)
	web := container("web0", "web", "10.244.1.2", nsWeb)
	l := libraryLedger(t)
	holdInNetns(t, nsWeb, l)
	holdInNetns(t, nsOther, libraryLedger(t)) // no container's: not listed
	fake := newNamedLedger(t, "freeflow-ledger", 4096, 8, 0)
	fake.putAnswer(0, pathShm, 1<<30, "10.244.1.2:40009", neighbour.IP+":9000", "")
	holdInNetns(t, nsWeb, fake) // unsealed: refused

	a := startAgent(t, newFakeDir(web, neighbour, remoteContainer), nil)
	wantWebEnds(t, a, 0)
	if n := agentMaps(t, l.name); n != 1 {
		t.Errorf("%d read-only mappings of ledgers; want the one of container web's process", n)
	}
	l.free(0)
	wantWebEnds(t, a, 1)
}

// TestLedgersFoundWhenContainerFound: an agent whose directory cache
// brings a local container only after it started (its cache fills
// asynchronously) finds that container's ledgers then, before it lists.
func TestLedgersFoundWhenContainerFound(t *testing.T) {
	needRoot(t, "ip")
	nsWeb := makeNetns(t)
	web := container("web0", "web", "10.244.1.2", nsWeb)
	holdInNetns(t, nsWeb, libraryLedger(t))
	dir := newFakeDir(neighbour, remoteContainer)
	a := startAgent(t, dir, nil)
	if got := a.connList(); len(got) != 0 {
		t.Fatalf("conns before the directory has container web: %+v", got)
	}
	dir.putContainer(web)
	wantWebEnds(t, a, 0)
}

// takeLedger takes only a regular memfd: a candidate that is anything
// else, a plain file named like a ledger memfd too, is not used.
func TestLedgerCandidateMustBeMemfd(t *testing.T) {
	needRoot(t)
	var p [2]int
	if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(p[0])
	defer unix.Close(p[1])
	file, err := os.CreateTemp(t.TempDir(), "ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	for name, fd := range map[string]int{"a pipe": p[0], "a file": int(file.Fd()), "a file named like a ledger": namedLikeLedger(t)} {
		used := false
		err := takeLedger(int32(os.Getpid()), fd, func(int) error { used = true; return nil })
		if err == nil || used {
			t.Errorf("%s: used (%v); want it refused before it is used", name, err)
		}
	}
}

// namedLikeLedger returns a plain file whose /proc fd link reads as a
// ledger memfd's.
func namedLikeLedger(t *testing.T) int {
	path := strings.TrimSuffix(ledgerLink, " (deleted)")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	os.Remove(path)
	t.Cleanup(func() { f.Close() })
	if link, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", f.Fd())); err != nil || link != ledgerLink {
		t.Fatalf("a file at %s reads as %q (%v); want %q", path, link, err, ledgerLink)
	}
	return int(f.Fd())
}

// TestLedgersFoundWhenContainerRegistered: a container registered with an
// agent while its processes already run (registered again after the
// agent restarted) is listed with their ledgers at once.
func TestLedgersFoundWhenContainerRegistered(t *testing.T) {
	needRoot(t, "ip")
	nsWeb := makeNetns(t)
	holdInNetns(t, nsWeb, libraryLedger(t))
	a := startAgent(t, newFakeDir(neighbour, remoteContainer), nil)
	if err := adminClient(t, a).Register(ctxT(t), container("web0", "web", "10.244.1.2", nsWeb)); err != nil {
		t.Fatal(err)
	}
	wantWebEnds(t, a, 0)
}
