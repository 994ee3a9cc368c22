package container_test

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

func TestTrafficSameHostAndCrossHost(t *testing.T) {
	needCluster(t)
	srv := testenv.RandomName("s", 5)
	startDetached(t, "h1", srv, "iperf3", "-s")
	sum := testenv.RandomName("m", 5)
	startDetached(t, "h1", sum, "python3", "-c", sumServer, fmt.Sprint(transferSize))
	waitListening(t, srv, 5201)
	waitListening(t, sum, 5001, 5002)

	for _, host := range []string{"h1", "h2"} { // h1: through the bridge; h2: through VXLAN
		for _, dir := range []string{"up", "down"} {
			t.Run(host+"-"+dir, func(t *testing.T) {
				iperf(t, host, srv, dir == "down")
				checksummed(t, host, sum, dir)
			})
		}
	}
}

// iperf moves transferSize with iperf3 from a client on host to server
// (reverse: server to client), by container name.
func iperf(t *testing.T, host, server string, reverse bool) {
	args := []string{"run", "--host", host, "--name", testenv.RandomName("i", 5), "--rm", "--",
		"iperf3", "-J", "-c", server, "-n", fmt.Sprint(transferSize)}
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
	out := mustFF(t, args...)
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
func checksummed(t *testing.T, host, server, dir string) {
	out := mustFF(t, "run", "--host", host, "--name", testenv.RandomName("c", 5), "--rm", "--",
		"python3", "-c", sumClient, dir, server, fmt.Sprint(transferSize))
	local, peer, ok := strings.Cut(strings.TrimSpace(out), " peer=")
	local = strings.TrimPrefix(local, "local=")
	want := fmt.Sprintf("%d ", transferSize)
	if !ok || local != peer || !strings.HasPrefix(local, want) || len(local) != len(want)+64 {
		t.Fatalf("checksummed %s transfer from %s: this end %q, the other end %q", dir, host, local, peer)
	}
}

// waitListening waits until container name listens on every port.
func waitListening(t *testing.T, name string, ports ...int) {
	for _, p := range ports {
		// /proc/net/tcp{,6} lines: local address:port, remote (zero) address:port, state (0A = LISTEN).
		pattern := fmt.Sprintf(":%04X [0-9A-F]+:0000 0A", p)
		waitFor(t, fmt.Sprintf("%s to listen on %d", name, p), func() bool {
			return ff(t, "exec", name, "--", "grep", "-qsE", pattern, "/proc/net/tcp", "/proc/net/tcp6").Code == 0
		})
	}
}
