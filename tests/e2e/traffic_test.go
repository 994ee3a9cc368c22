package e2e

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/freeflow-net/freeflow/internal/testenv"
)

// transferSize is what moves each way: 100 MB.
const transferSize = 100 << 20

// sumServer serves checksummed transfers: on port 5001 it reads until EOF
// and answers "<bytes> <sha256>"; on port 5002 it sends N random bytes and
// then the 64-character sha256 of what it sent.
const sumServer = `
import hashlib, os, socket, sys, threading
N = int(sys.argv[1])
def upload(c):
    h, n = hashlib.sha256(), 0
    while True:
        b = c.recv(1 << 20)
        if not b:
            break
        h.update(b); n += len(b)
    c.sendall(f"{n} {h.hexdigest()}".encode()); c.close()
def download(c):
    h, left = hashlib.sha256(), N
    while left:
        b = os.urandom(min(left, 1 << 20)); h.update(b); c.sendall(b); left -= len(b)
    c.sendall(h.hexdigest().encode()); c.close()
def serve(port, fn):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", port)); s.listen(8)
    while True:
        c, _ = s.accept(); threading.Thread(target=fn, args=(c,)).start()
threading.Thread(target=serve, args=(5001, upload), daemon=True).start()
serve(5002, download)
`

// sumClient does one transfer with the server named argv[2] and prints
// "local=<bytes> <sha256> peer=<bytes> <sha256>" for the test to compare.
const sumClient = `
import hashlib, os, socket, sys
mode, host, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
h = hashlib.sha256()
if mode == "up":
    s = socket.create_connection((host, 5001)); left = N
    while left:
        b = os.urandom(min(left, 1 << 20)); h.update(b); s.sendall(b); left -= len(b)
    s.shutdown(socket.SHUT_WR)
    peer = s.makefile().read()
    print(f"local={N} {h.hexdigest()} peer={peer}")
else:
    s = socket.create_connection((host, 5002)); data, n = b"", 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        data += b
        if len(data) > 64:
            h.update(data[:-64]); n += len(data) - 64; data = data[-64:]
    print(f"local={n} {h.hexdigest()} peer={N} {data.decode()}")
`

// A mode is how the containers of one run are started, and the path their
// connections must take same host and cross host.
type mode struct {
	name            string
	flags           []string
	sameHost, cross string // expected pathCheck paths; cross "": not run cross host
	sameReason      string // the reason every same-host connection must give, if any
}

var modes = []mode{
	{name: "overlay", flags: []string{"--no-freeflow"}, sameHost: "none", cross: "none"},
	{name: "freeflow", sameHost: "shm", cross: "host-tcp"},
}

// noShm is FreeFlow with the shared-memory channel turned off for the
// containers: same host on a kernel socket pair (cross host it is the
// freeflow mode's host-tcp, so it is not run there again).
var noShm = mode{name: "freeflow-no-shm", flags: []string{"--no-shm"}, sameHost: "unix", sameReason: "shm-off"}

// TestTransfersIntactOnEveryPath moves 100 MB each way with iperf3 and with
// a checksummed transfer, same host and cross host, by container name, on
// the baseline overlay and on FreeFlow's fast paths (same host: shared
// memory, and with --no-shm a socket pair), and checks the path each
// connection took.
func TestTransfersIntactOnEveryPath(t *testing.T) {
	c := newCluster(t, 2)
	for _, m := range append(modes, noShm) {
		srv, sum := testenv.RandomName("s", 5), testenv.RandomName("m", 5)
		c.StartDetached(t, "h1", srv, m.flags, "iperf3", "-s")
		c.StartDetached(t, "h1", sum, m.flags, "python3", "-c", sumServer, fmt.Sprint(transferSize))
		c.WaitListening(t, srv, 5201)
		c.WaitListening(t, sum, 5001, 5002)
		for _, host := range []string{"h1", "h2"} {
			want, reason, involved := m.sameHost, m.sameReason, []string{"h1"}
			if host != "h1" {
				want, reason, involved = m.cross, "", []string{"h1", "h2"}
			}
			if want == "" {
				continue
			}
			for _, dir := range []string{"up", "down"} {
				t.Run(m.name+"-"+host+"-"+dir, func(t *testing.T) {
					paths := watchPaths(t, c, involved...)
					iperf(t, c, host, srv, m.flags, dir == "down")
					checksummed(t, c, host, sum, m.flags, dir)
					paths.expect(t, want, reason)
				})
			}
		}
	}
}

// iperf moves transferSize with iperf3 from a client on host to server
// (reverse: server to client), by container name.
func iperf(t *testing.T, c *testenv.Cluster, host, server string, flags []string, reverse bool) {
	args := append([]string{"run", "--host", host, "--name", testenv.RandomName("i", 5), "--rm"}, flags...)
	args = append(args, "--", "iperf3", "-J", "-c", server, "-n", fmt.Sprint(transferSize))
	if reverse {
		args = append(args, "-R")
	}
	var res struct {
		End struct {
			Sent     struct{ Bytes int64 } `json:"sum_sent"`
			Received struct{ Bytes int64 } `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	out := c.MustFF(t, args...)
	if err := json.Unmarshal([]byte(out), &res); err != nil || res.Error != "" {
		t.Fatalf("iperf3: %v %s\n%s", err, res.Error, out)
	}
	// iperf3 -n stops counting at the receiver when the sender is done, so
	// only the sender's count is exact; the checksummed transfer checks delivery.
	if res.End.Sent.Bytes < transferSize || res.End.Received.Bytes == 0 {
		t.Fatalf("iperf3 sent %d, received %d bytes; want %d sent", res.End.Sent.Bytes, res.End.Received.Bytes, transferSize)
	}
}

// checksummed moves transferSize to (up) or from (down) the sum server and
// compares the byte counts and sha256 digests both ends computed.
func checksummed(t *testing.T, c *testenv.Cluster, host, server string, flags []string, dir string) {
	args := append([]string{"run", "--host", host, "--name", testenv.RandomName("c", 5), "--rm"}, flags...)
	out := c.MustFF(t, append(args, "--", "python3", "-c", sumClient, dir, server, fmt.Sprint(transferSize))...)
	local, peer, ok := strings.Cut(strings.TrimSpace(out), " peer=")
	local = strings.TrimPrefix(local, "local=")
	want := fmt.Sprintf("%d ", transferSize)
	if !ok || local != peer || !strings.HasPrefix(local, want) || len(local) != len(want)+64 {
		t.Fatalf("checksummed %s transfer from %s: this end %q, the other end %q", dir, host, local, peer)
	}
}
