package protocol

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
)

// MaxFDs is how many file descriptors one message may carry. A message with
// more is refused as malformed and every descriptor received is closed.
const MaxFDs = 16

// Conn is one SOCK_SEQPACKET connection: one datagram is one message, and
// file descriptors ride along as SCM_RIGHTS. It is not safe for concurrent
// reads (or concurrent writes); the protocol has one request outstanding.
type Conn struct {
	uc  *net.UnixConn
	buf []byte
	oob []byte
}

// NewConn wraps a "unixpacket" connection.
func NewConn(uc *net.UnixConn) *Conn {
	return &Conn{uc: uc, buf: make([]byte, MaxMessage), oob: make([]byte, syscall.CmsgSpace(MaxFDs*4))}
}

// Dial connects to the agent socket at path.
func Dial(path string) (*Conn, error) {
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("connect to agent socket %s (is freeflowd running?): %w", path, err)
	}
	return NewConn(uc), nil
}

// Unix returns the underlying connection (for SO_PEERCRED and the like).
func (c *Conn) Unix() *net.UnixConn { return c.uc }

// Close closes the connection.
func (c *Conn) Close() error { return c.uc.Close() }

// SetReadDeadline bounds the next ReadMsg.
func (c *Conn) SetReadDeadline(t time.Time) error { return c.uc.SetReadDeadline(t) }

// SetWriteDeadline bounds the next WriteMsg.
func (c *Conn) SetWriteDeadline(t time.Time) error { return c.uc.SetWriteDeadline(t) }

// ReadMsg reads one message and the descriptors it carries, which the
// caller then owns. It returns io.EOF when the peer has closed (a zero-byte
// datagram reads the same way), a network error as is, and an *Error for a
// message the protocol rejects (oversized, too many descriptors, or refused
// by Decode); descriptors of a rejected message are closed. When Decode
// refuses a message whose header could be read, the returned message holds
// just its Type and Seq, so that the ERROR reply can carry the same seq.
func (c *Conn) ReadMsg() (*Message, []int, error) {
	n, oobn, flags, _, err := c.uc.ReadMsgUnix(c.buf, c.oob)
	if errors.Is(err, io.EOF) {
		return nil, nil, io.EOF
	}
	if err != nil {
		return nil, nil, err
	}
	fds, ferr := parseRights(c.oob[:oobn])
	switch {
	case ferr != nil:
		CloseFDs(fds)
		return nil, nil, ferr
	case flags&syscall.MSG_CTRUNC != 0:
		CloseFDs(fds)
		return nil, nil, Errorf(CodeBadMsg, "message carries more than %d file descriptors", MaxFDs)
	case flags&syscall.MSG_TRUNC != 0:
		CloseFDs(fds)
		return nil, nil, Errorf(CodeBadMsg, "message is larger than %d bytes", MaxMessage)
	case n == 0:
		CloseFDs(fds)
		return nil, nil, io.EOF
	}
	m, err := Decode(c.buf[:n])
	if err != nil {
		CloseFDs(fds)
		return headerOnly(c.buf[:n]), nil, err
	}
	return m, fds, nil
}

// WriteMsg sends m with fds attached (the caller keeps its descriptors).
func (c *Conn) WriteMsg(m *Message, fds ...int) error {
	b, err := Encode(m)
	if err != nil {
		return err
	}
	if len(fds) > MaxFDs {
		return Errorf(CodeInternal, "cannot send %d file descriptors, at most %d", len(fds), MaxFDs)
	}
	var oob []byte
	if len(fds) > 0 {
		oob = syscall.UnixRights(fds...)
	}
	n, _, err := c.uc.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return err
	}
	if n != len(b) {
		return fmt.Errorf("short write: %d of %d bytes", n, len(b))
	}
	return nil
}

// headerOnly returns the type and seq of a rejected message, or nil if it
// is too short to have them.
func headerOnly(b []byte) *Message {
	if len(b) < 8 {
		return nil
	}
	return &Message{Type: Type(b[3]), Seq: binary.LittleEndian.Uint32(b[4:])}
}

// parseRights returns the descriptors in SCM_RIGHTS control messages;
// other control messages are ignored.
func parseRights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	cmsgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, Errorf(CodeBadMsg, "unreadable control message: %w", err)
	}
	var fds []int
	for _, cm := range cmsgs {
		if cm.Header.Level != syscall.SOL_SOCKET || cm.Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&cm)
		if err != nil {
			return fds, Errorf(CodeBadMsg, "unreadable SCM_RIGHTS: %w", err)
		}
		fds = append(fds, got...)
	}
	return fds, nil
}

// CloseFDs closes descriptors received with a message, for a caller that
// has no use for them (errors are ignored: each was ours to close).
func CloseFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}
