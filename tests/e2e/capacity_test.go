package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/freeflow-net/freeflow/internal/state"
	"github.com/freeflow-net/freeflow/internal/testenv"
)

// hogPy, a container's main process, opens argv[1] sessions with the
// agent (a HELLO on each), as many threads each opening its own would,
// keeps those the agent accepted until the container is removed, and
// writes "ok=N limit=N closed=N hung=N other=N" to /tmp/hog.out. Each of
// its holding processes opens as many as its open file limit allows.
const hogPy = `
import os, resource, signal, socket, struct, sys
n = int(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
per = max(1, hard - 64)
HELLO = struct.pack("<HBBII", 0x4646, 1, 0x01, 1, 0)
def hello(held):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(5)
    try:
        s.connect("/run/freeflow/agent.sock")
        s.send(HELLO)
        r = s.recv(65536)
    except socket.timeout:
        s.close(); return "hung"
    except OSError:
        s.close(); return "closed"
    if len(r) < 12:
        s.close(); return "closed"
    if r[3] == 0x02:
        held.append(s); return "ok"
    s.close()
    code = struct.unpack("<I", r[16:20])[0] if r[3] == 0x7f and len(r) >= 20 else -1
    return "limit" if code == 10 else "other"
total = dict(ok=0, limit=0, closed=0, hung=0, other=0)
while n > 0:
    chunk, n = min(n, per), n - min(n, per)
    rd, wr = os.pipe()
    if os.fork() == 0:
        held, got = [], dict(total)
        for k in got: got[k] = 0
        for _ in range(chunk):
            got[hello(held)] += 1
        os.write(wr, (" ".join("%s=%d" % kv for kv in got.items()) + "\n").encode())
        while True:
            signal.pause()
    os.close(wr)
    line = os.fdopen(rd).readline()
    for kv in line.split():
        k, v = kv.split("=")
        total[k] += int(v)
with open("/tmp/hog.tmp", "w") as f:
    f.write(" ".join("%s=%d" % kv for kv in total.items()))
os.rename("/tmp/hog.tmp", "/tmp/hog.out")
while True:
    signal.pause()
`

// TestContainerOverSessionLimitLocksOutNobody: a container that opens 100
// sessions more than its limit gets its limit, each one beyond it is told
// LIMIT (or closed at once, never left hanging), and meanwhile another
// container on the same host still gets its fast path, `freeflow run`
// there works, and `freeflow status` shows the agent answering.
func TestContainerOverSessionLimitLocksOutNobody(t *testing.T) {
	c := newCluster(t, 1)
	srv := testenv.RandomName("s", 5)
	c.StartDetached(t, "h1", srv, nil, "python3", "-c", sumServer, fmt.Sprint(transferSize))
	c.WaitListening(t, srv, 5001, 5002)
	limit := agentStatus(t, c, "h1").Limits.SessionsPerContainer

	c.StartDetached(t, "h1", "hog", []string{"--tenant", "red"}, "python3", "-c", hogPy, fmt.Sprint(limit+100))
	var out string
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hog's output:\n%s", c.FF(t, "logs", "hog").Stdout)
		}
	})
	testenv.WaitFor(t, "the hog to open its sessions", func() bool {
		r := c.FF(t, "exec", "hog", "--", "cat", "/tmp/hog.out")
		out = strings.TrimSpace(r.Stdout)
		return r.Code == 0
	})
	t.Logf("hog: %s", out)
	var ok, refused, closed, hung, other int
	if _, err := fmt.Sscanf(out, "ok=%d limit=%d closed=%d hung=%d other=%d", &ok, &refused, &closed, &hung, &other); err != nil {
		t.Fatalf("hog output %q: %v", out, err)
	}
	if ok != limit || refused == 0 || refused+closed != 100 || hung != 0 || other != 0 {
		t.Fatalf("hog opening %d sessions with a limit of %d: %s; want ok=%d, the other 100 told LIMIT (some may be closed at once), none hung",
			limit+100, limit, out, limit)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	hog := lookup(ctx, t, state.NewLayout(c.Name), "hog")
	if held := agentStatus(t, c, "h1").SessionsHeld[hog.ID]; held != limit {
		t.Fatalf("the agent counts %d sessions of the hog, want %d (it holds them until removed)", held, limit)
	}

	if st := c.MustFF(t, "status"); strings.Contains(st, "not answering") {
		t.Fatalf("freeflow status while the hog holds its sessions:\n%s", st)
	}
	paths := watchPaths(t, c, "h1")
	checksummed(t, c, "h1", srv, nil, "up") // a new container, by `freeflow run`
	paths.expect(t, "shm", "")
}
