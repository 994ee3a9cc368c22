package agentapi

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
)

// defaultCallTimeout bounds a call whose context has no deadline.
const defaultCallTimeout = 10 * time.Second

// Client speaks the protocol on the library socket (as the C library
// does). Errors from the agent are *protocol.Error with its code and
// message. A Client is not safe for concurrent use.
type Client struct {
	conn *protocol.Conn
	seq  uint32
}

// Peer is a LOOKUP answer.
type Peer struct {
	Name, Host, Tenant string
	IP                 netip.Addr
	Local, FreeFlow    bool
}

// Dial connects to an agent socket; the session starts with Hello.
func Dial(path string) (*Client, error) {
	conn, err := protocol.Dial(path)
	if err != nil {
		return nil, err
	}
	return &Client{conn: conn}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Hello starts the session and returns the caller's container as the
// agent identified it (only ID etc. on the library socket; empty on the
// admin socket).
func (c *Client) Hello(ctx context.Context) (directory.Container, error) {
	r, err := c.Call(ctx, protocol.New(protocol.TypeHello, 0, protocol.String(protocol.AttrLibVersion, "go-"+Version)), protocol.TypeHelloReply)
	if err != nil {
		return directory.Container{}, err
	}
	var id directory.Container
	id.ID, _ = r.String(protocol.AttrContainerID)
	id.Name, _ = r.String(protocol.AttrName)
	id.Tenant, _ = r.String(protocol.AttrTenant)
	id.Host, _ = r.String(protocol.AttrHost)
	if ip, err := r.IP(); err == nil {
		id.IP = ip.String()
	}
	return id, nil
}

// Lookup asks where ip lives; found is false if no container has it.
func (c *Client) Lookup(ctx context.Context, ip netip.Addr) (p Peer, found bool, err error) {
	r, err := c.Call(ctx, protocol.New(protocol.TypeLookup, 0, protocol.IP(ip)), protocol.TypeLookupReply)
	if err != nil {
		return Peer{}, false, err
	}
	if found, err = r.Bool(protocol.AttrFound); err != nil || !found {
		return Peer{}, false, err
	}
	p.Name, _ = r.String(protocol.AttrName)
	p.Host, _ = r.String(protocol.AttrHost)
	p.Tenant, _ = r.String(protocol.AttrTenant)
	p.IP, _ = r.IP()
	p.Local, _ = r.Bool(protocol.AttrLocal)
	p.FreeFlow, _ = r.Bool(protocol.AttrFreeFlow)
	return p, true, nil
}

// Call sends request m with the next seq and returns the reply, which must
// have type want and the same seq; an ERROR reply becomes its
// *protocol.Error. It serves requests that have no method here.
func (c *Client) Call(ctx context.Context, m *protocol.Message, want protocol.Type) (*protocol.Message, error) {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(defaultCallTimeout)
	}
	c.seq++
	m.Seq = c.seq
	c.conn.SetWriteDeadline(deadline)
	c.conn.SetReadDeadline(deadline)
	if err := c.conn.WriteMsg(m); err != nil {
		return nil, fmt.Errorf("send %v to agent: %w", m.Type, err)
	}
	r, fds, err := c.conn.ReadMsg()
	protocol.CloseFDs(fds)
	if err != nil {
		return nil, fmt.Errorf("read agent reply to %v: %w", m.Type, err)
	}
	if r.Seq != m.Seq {
		return nil, fmt.Errorf("agent replied to seq %d, want %d: protocol out of step; reconnect", r.Seq, m.Seq)
	}
	if e := r.Err(); e != nil {
		return nil, e
	}
	if r.Type != want {
		return nil, fmt.Errorf("agent answered %v with %v, want %v", m.Type, r.Type, want)
	}
	return r, nil
}
