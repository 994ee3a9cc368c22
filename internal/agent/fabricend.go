package agent

import (
	"fmt"
	"syscall"

	"golang.org/x/sys/unix"
)

// How a fabric connection ends (docs/PROTOCOL.md, "How a fabric
// connection ends"). Every host-tcp connection lives in its host's
// namespace, shared by all its containers, and the end that closes first
// would keep it in TIME_WAIT there for 60 s: tens of thousands under
// churn, and on the dialing host each holds an ephemeral port towards one
// peer address and port. A reset on close would avoid it but could
// discard bytes not yet delivered. TCP_LINGER2 -1 does neither: a socket
// closed first still sends its bytes and its FIN as ever, and only once
// the peer has acknowledged all of them does the kernel end it with a
// reset instead of waiting in FIN_WAIT2 and TIME_WAIT. By then the peer
// has every byte and the end of stream (it reads them, then EOF); only
// writes after that fail at once, where TCP would have answered them with
// a reset a round trip later. The option matters only for a socket no
// process holds any more, so it changes nothing while the connection is
// in use, or for a half-close.
//
// Every fabric TCP socket the agents make carries it: broker connections,
// dialed and accepted (a listener's connections inherit it), link
// listeners and stock connections, handed or not.

// endOnceAcked sets TCP_LINGER2 -1 on socket fd.
func endOnceAcked(fd int) error {
	if err := unix.SetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_LINGER2, -1); err != nil {
		return fmt.Errorf("set TCP_LINGER2 on a fabric socket: %w", err)
	}
	return nil
}

// fabricControl is the Control of the net.Dialer and net.ListenConfig
// that make fabric sockets: endOnceAcked before connect or listen.
func fabricControl(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = endOnceAcked(int(fd)) }); err != nil {
		return err
	}
	return serr
}
