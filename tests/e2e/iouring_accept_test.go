package e2e

import (
	"os"
	"strconv"
	"strings"
	"testing"
)

// TestIoUringAcceptServerCostsNoWait: a library-enabled server that
// accepts through io_uring (IORING_OP_ACCEPT, one entry per connection or
// one multishot entry), whose connections the library does not see,
// withdraws its listener from the agent when it submits its first accept,
// so each of its library-enabled clients takes the overlay at once
// (listener-not-freeflow) instead of waiting 45 ms for an ACCEPT that
// cannot come (peer-timeout); every byte of every connection intact.
func TestIoUringAcceptServerCostsNoWait(t *testing.T) {
	const conns = 50
	c := newCluster(t, 1)
	src, err := os.ReadFile("testdata/iouring-accept/main.c")
	must(t, err, "read the io_uring server's source")
	bin := buildC(t, "iouring-accept", string(src))
	for _, mode := range []string{"single", "multishot"} {
		t.Run(mode, func(t *testing.T) {
			srv := "uring-" + mode
			c.StartDetached(t, "h1", srv, volume(bin, "/tmp/iouring-accept"), "/tmp/iouring-accept", "7001", mode)
			waitLog(t, c, srv, "accepting")
			paths := watchPaths(t, c, "h1")
			r := runClient(t, c, "h1", nil, "python3", "-c", manyEchoPy, srv, "7001", strconv.Itoa(conns))
			if got := strings.Count(r.Stdout, " OK\n"); got != conns || !strings.Contains(r.Stdout, "done") {
				t.Fatalf("%d of %d connections echoed intact\nstdout: %s\nstderr: %s", got, conns, r.Stdout, r.Stderr)
			}
			paths.expect(t, "overlay", "listener-not-freeflow")
		})
	}
}
