package agent

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// An asker is a child process playing one end's library from inside a
// container's network namespace: it opens a session (sends LEDGER and
// LISTENs if told), says "ready", asks CONNECT or ACCEPT when the parent
// says go, moves a few bytes on a fast path, reports, and keeps its
// session (and so its entries in the agent) until the parent closes its
// stdin.
type askSpec struct {
	Sock   string `json:"sock"`
	Ledger bool   `json:"ledger,omitempty"` // send the descriptor inherited as fd 3 as LEDGER
	Listen string `json:"listen,omitempty"`
	Ask    string `json:"ask"` // connect or accept
	Local  string `json:"local"`
	Remote string `json:"remote"`
	Caps   uint32 `json:"caps,omitempty"` // CAPS of the session's HELLO
}

type askResult struct {
	Path     string        `json:"path"`
	Reason   string        `json:"reason"`
	Data     string        `json:"data"`      // "ok" when the bytes made the round trip
	SockName string        `json:"sock_name"` // the handed socket's own address
	PeerName string        `json:"peer_name"`
	Elapsed  time.Duration `json:"elapsed"` // from the ask to its answer
	Err      string        `json:"err,omitempty"`
}

const envAsk = "FF_AGENT_TEST_ASK"

// askChild is the child's side; its exit code is 0 unless it could not run.
func askChild() int {
	var spec askSpec
	if err := json.Unmarshal([]byte(os.Getenv(envAsk)), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "asker:", err)
		return 2
	}
	in := bufio.NewReader(os.Stdin)
	res := runAsk(spec, in)
	json.NewEncoder(os.Stdout).Encode(res)
	io.Copy(io.Discard, in) // hold the session until the parent is done
	return 0
}

func runAsk(spec askSpec, in *bufio.Reader) (res askResult) {
	l, err := dialLibCaps(spec.Sock, spec.Caps)
	if err != nil {
		return askResult{Err: err.Error()}
	}
	if spec.Ledger {
		if err := l.ledger(3); err != nil {
			return askResult{Err: "send LEDGER: " + err.Error()}
		}
		if _, err := l.lookup(selfIP); err != nil { // its reply says LEDGER was applied
			return askResult{Err: "lookup after LEDGER: " + err.Error()}
		}
	}
	if spec.Listen != "" {
		if err := l.listen(spec.Listen); err != nil {
			return askResult{Err: "listen: " + err.Error()}
		}
	}
	fmt.Println("ready")
	if _, err := in.ReadString('\n'); err != nil {
		return askResult{Err: "wait for go: " + err.Error()}
	}
	typ := protocol.TypeConnect
	if spec.Ask == "accept" {
		typ = protocol.TypeAccept
	}
	r, err := l.ask(typ, spec.Local, spec.Remote)
	if err != nil {
		return askResult{Err: err.Error()}
	}
	res = askResult{Path: pathName(r.Kind), Reason: r.Reason, Elapsed: r.Elapsed}
	if r.FD >= 0 {
		defer closeResult(r)
		res.SockName, res.PeerName = sockNames(r.FD)
		if r.Mem >= 0 {
			res.Data = shmPingPong(r.FD, r.Mem, spec.Ask == "connect")
		} else {
			res.Data = pingPong(r.FD, spec.Ask == "connect")
		}
	}
	return res
}

// pingPong sends "ping" one way and "pong" back.
func pingPong(fd int, first bool) string {
	send, want := "pong", "ping"
	if first {
		send, want = "ping", "pong"
		if _, err := syscall.Write(fd, []byte(send)); err != nil {
			return err.Error()
		}
	}
	got, err := readFull(fd, 4)
	if err != nil || string(got) != want {
		return fmt.Sprintf("read %q, %v; want %q", got, err, want)
	}
	if !first {
		if _, err := syscall.Write(fd, []byte(send)); err != nil {
			return err.Error()
		}
	}
	return "ok"
}

func sockNames(fd int) (string, string) {
	name := func(sa syscall.Sockaddr, err error) string {
		switch v := sa.(type) {
		case *syscall.SockaddrInet4:
			return netip.AddrPortFrom(netip.AddrFrom4(v.Addr), uint16(v.Port)).String()
		case *syscall.SockaddrUnix:
			return "unix"
		}
		return fmt.Sprint(sa, err)
	}
	return name(syscall.Getsockname(fd)), name(syscall.Getpeername(fd))
}

// asker is the parent's handle on one child.
type asker struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
}

// startAsker runs an asker in network namespace ns (the test's own if
// "") with the extra descriptors files (fd 3 on), and waits for "ready".
func startAsker(t *testing.T, ns string, spec askSpec, files ...*os.File) *asker {
	t.Helper()
	return startAskerVia(t, inNetns(ns), spec, files...)
}

// inNetns is the command that runs a child in network namespace ns, none
// for the test's own ("").
func inNetns(ns string) []string {
	if ns == "" {
		return nil
	}
	return []string{"ip", "netns", "exec", ns}
}

// withoutMarkCaps runs a child without CAP_NET_RAW and CAP_NET_ADMIN, as
// a process of a container `freeflow run` started: only such a process
// gets fabric sockets from an agent with the fabric guard (mayClearMark).
var withoutMarkCaps = []string{"setpriv", "--bounding-set=-net_raw,-net_admin", "--"}

// asContainer runs a child in network namespace ns withoutMarkCaps.
func asContainer(ns string) []string { return append(inNetns(ns), withoutMarkCaps...) }

// startAskerVia is startAsker for an asker that the command via (such as
// inNetns) runs.
func startAskerVia(t *testing.T, via []string, spec askSpec, files ...*os.File) *asker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	j, _ := json.Marshal(spec)
	args := append(append([]string{}, via...), exe, "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), envChild+"=ask", envAsk+"="+string(j))
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = files
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &asker{cmd: cmd, stdin: stdin, out: bufio.NewReader(stdout)}
	t.Cleanup(a.finish)
	if line, err := a.out.ReadString('\n'); strings.TrimSpace(line) != "ready" {
		t.Fatalf("asker via %q: %q, %v", via, line, err)
	}
	return a
}

func (a *asker) goAhead() { io.WriteString(a.stdin, "go\n") }

func (a *asker) result(t *testing.T) askResult {
	t.Helper()
	line, err := a.out.ReadString('\n')
	var r askResult
	if err != nil || json.Unmarshal([]byte(line), &r) != nil {
		t.Fatalf("asker result %q: %v", line, err)
	}
	return r
}

// finish ends the child and waits for it.
func (a *asker) finish() {
	a.stdin.Close()
	done := make(chan struct{})
	go func() { a.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		a.cmd.Process.Kill()
		<-done
	}
}

// askPair runs a connector in nsC and an acceptor (which LISTENs first)
// in nsA, lets both ask at once and returns their results.
func askPair(t *testing.T, nsC, nsA string, con, acc askSpec) (*asker, *asker, askResult, askResult) {
	t.Helper()
	return askPairVia(t, inNetns(nsC), inNetns(nsA), con, acc)
}

// askPairVia is askPair for askers that the commands viaC and viaA run.
func askPairVia(t *testing.T, viaC, viaA []string, con, acc askSpec) (*asker, *asker, askResult, askResult) {
	t.Helper()
	ca, cc := startAskerVia(t, viaA, acc), startAskerVia(t, viaC, con)
	ca.goAhead()
	cc.goAhead()
	return cc, ca, cc.result(t), ca.result(t)
}
