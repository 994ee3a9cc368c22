package agent

// Design note: the buffers of a unix channel (PROTOCOL.md, "Shared memory").
//
// An AF_UNIX stream socket holds unread at most its own send buffer: the
// peer's receive buffer plays no part. With the kernel's default
// (net.core.wmem_default, 208 KiB) a program that writes a whole message
// of 1 MiB before it reads the answer, both ends at once, blocks forever,
// where TCP between the same two containers holds it: the sender's send
// buffer and the receiver's receive buffer autotune up to tcp_wmem and
// tcp_rmem max. So the agent sets each end's send buffer to the sum of
// those two maxima, read once from its own network namespace (containers'
// namespaces copy the same values from the host's at creation, and cannot
// change them: /proc/sys is read-only in a container), with
// SO_SNDBUFFORCE, as the sum is above net.core.wmem_max.
//
// The size is a limit, not a reservation: an idle channel holds nothing,
// and the kernel frees each piece as it is read. What is in flight is
// charged to the memory cgroup of the process that wrote it, as the shm
// channel's ring pages are (SHM.md) and a TCP connection's send buffer is,
// so a container that writes without reading holds its own memory, at
// most this much per connection and direction (a peer that never reads
// leaves it all with the writer, where TCP would hold the part past the
// send buffer in the reader's cgroup). A container could pin as much with
// socket pairs of its own (twice wmem_max each, no privilege needed), so
// no budget of the agent's is needed for it. An application that sets SO_SNDBUF itself gets its
// own size (lib/src/calls/sockopt.c carries it over at the swap), as it asked.

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

const (
	// unixBufFallback is the send buffer of a unix channel's end when the
	// TCP sysctls cannot be read: their sum on Linux 6.18's defaults
	// (4 MiB tcp_wmem max, 32 MiB tcp_rmem max).
	unixBufFallback = 36 << 20
	// unixBufMax bounds it: SO_SNDBUFFORCE takes an int, which the kernel
	// doubles.
	unixBufMax = 1 << 30
)

// unixBuf is the send buffer each end of a unix channel gets.
var unixBuf = sync.OnceValue(func() int {
	w, errW := sysctlMax("/proc/sys/net/ipv4/tcp_wmem")
	r, errR := sysctlMax("/proc/sys/net/ipv4/tcp_rmem")
	if errW != nil || errR != nil {
		return unixBufFallback
	}
	return min(w+r, unixBufMax)
})

// sysctlMax returns the last of the numbers in the sysctl file at path
// (min, default, max for tcp_wmem and tcp_rmem).
func sysctlMax(path string) (int, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, fmt.Errorf("%s is empty", path)
	}
	n, err := strconv.Atoi(f[len(f)-1])
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s: %q is not a positive size", path, f[len(f)-1])
	}
	return n, nil
}

// unixBufWarned: an agent that cannot size the buffers says so once.
var unixBufWarned sync.Once

// sizeUnixPair gives both ends of a unix channel a send buffer of unixBuf.
// One it cannot set (no CAP_NET_ADMIN) is as large as SO_SNDBUF allows,
// twice net.core.wmem_max: the channel works, holding less.
func (a *Agent) sizeUnixPair(fds [2]int) {
	n := unixBuf() / 2 // the kernel doubles it
	for _, fd := range fds {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, n); err != nil {
			unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, n)
			unixBufWarned.Do(func() {
				a.log.Warn("set a unix channel's send buffers with SO_SNDBUFFORCE; they hold twice net.core.wmem_max, "+
					"so a program that writes a larger whole message before it reads may block: run the agent as root",
					"want", 2*n, "err", err)
			})
		}
	}
}
