package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// memcachedPy stores random values of several sizes with the text protocol
// ("set"), reads each back with "get" and all at once with a multi-key
// "get", and prints "OK <values>" if every value came back intact.
const memcachedPy = `
import os, socket, sys
s = socket.create_connection((sys.argv[1], 11211)); f = s.makefile("rb")
vals = {"k%d" % i: os.urandom(n) for i, n in enumerate([1, 100, 4096, 65536, 300000, 900000])}
def value():
    head = f.readline().split()
    assert head[0] == b"VALUE", head
    data = f.read(int(head[3]) + 2)
    return head[1].decode(), data[:-2]
for k, v in vals.items():
    s.sendall(b"set %s 0 0 %d\r\n" % (k.encode(), len(v)) + v + b"\r\n")
    assert f.readline() == b"STORED\r\n", k
for k, v in vals.items():
    s.sendall(b"get %s\r\n" % k.encode())
    assert value() == (k, v), "%s came back different" % k
    assert f.readline() == b"END\r\n"
s.sendall(b"get " + " ".join(vals).encode() + b"\r\n")
got = dict(value() for _ in vals)
assert f.readline() == b"END\r\n" and got == vals, "multi-get came back different"
print("OK", len(vals))
`

// TestMemcached: a python3 client stores and fetches random values in
// memcached intact, and memcslap completes its sets and gets, same host
// and cross host, on the overlay and on the fast paths.
func TestMemcached(t *testing.T) {
	if m := testenv.Missing("memcached", "memcslap"); m != "" {
		t.Skip(m)
	}
	c := newCluster(t, 2)
	onEveryPath(t, c, func(t *testing.T, m mode) string {
		srv := testenv.RandomName("mc", 4)
		c.StartDetached(t, "h1", srv, m.flags, "memcached", "-u", "root", "-l", "0.0.0.0", "-p", "11211", "-U", "0")
		c.WaitListening(t, srv, 11211)
		return srv
	}, func(t *testing.T, host, srv string, flags []string) {
		if out := runClient(t, c, host, flags, "python3", "-c", memcachedPy, srv).Stdout; out != "OK 6\n" {
			t.Fatalf("memcached client: %q, want OK 6", out)
		}
		memcslap(t, c, host, srv, flags)
	})
}

var memcslapGets = regexp.MustCompile(`Time to get\s+1000 keys by\s+2 threads`)

// memcslap runs memcslap's get test (it first sets its 500 keys), which
// exits 0 even when it cannot reach the server: errors show on stderr and
// as fewer keys done.
func memcslap(t *testing.T, c *testenv.Cluster, host, srv string, flags []string) {
	r := runClient(t, c, host, flags, "memcslap", "--servers="+srv+":11211", "--concurrency=2", "--execute-number=500", "--test=get")
	if !memcslapGets.MatchString(r.Stdout) || strings.TrimSpace(r.Stderr) != "" {
		t.Fatalf("memcslap: want 1000 gets by 2 threads and no error\nstdout: %s\nstderr: %s", r.Stdout, r.Stderr)
	}
}
