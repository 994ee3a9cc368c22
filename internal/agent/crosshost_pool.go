package agent

// Design note: pooled offer connections (PROTOCOL.md, "Cross-host
// offers").
//
// A cross-host fast path is the very TCP connection its OFFER travelled
// on, so every new connection needs a new fabric connection. Dialing it
// after the CONNECT put a TCP handshake, a goroutine start and an accept
// on the acceptor's agent inside every cross-host connection setup. So,
// as Slim keeps connections ready, the connector's agent keeps a few
// connections to each peer host's broker port open ahead of need; an
// OFFER goes on one of them, and that connection then becomes the data
// path exactly as a freshly dialed one did. A pooled connection carries
// one OFFER and is never returned to the pool.
//
// Nothing about trust changes. A pooled connection opens with a HELLO
// (HOST, NONCE, TIME, MAC) that the acceptor's agent checks as it checks
// an offer: the MAC under the cluster key, TIME within the clock window,
// a fresh nonce, and HOST naming the host whose fabric address the
// connection comes from. Only then may the connection wait for its OFFER
// beyond offerReadLimit (up to standbyLimit), and each sending host may
// keep at most maxStandbyPerHost such connections; anything else still
// gets offerReadLimit to send a valid OFFER, as before. The OFFER on a
// pooled connection is checked in full, with its own nonce and time, so a
// pooled connection gives no one a fast path that a fresh one would not.
//
// Liveness. The connector's agent retires a pooled connection at
// poolMaxAge, well before the acceptor's agent drops it (standbyLimit),
// and checks that one is still open (no EOF, no reset, no unexpected
// bytes) right before it writes an OFFER on it. If the OFFER still finds
// the connection dead (the peer agent restarted a moment ago), it fails
// before any reply byte: the offer is then made once more on a fresh
// connection, within the same budget. The pool is bounded (poolSize per
// peer host) and filled in the background: an offer signals a refill of
// its host's pool, and a host that no one offers to any more holds no
// connection after poolMaxAge.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/directory"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

const (
	poolSize          = 4                // idle connections kept to each peer host
	poolMaxAge        = 30 * time.Second // the connector's agent retires an unused one this old
	poolDialLimit     = time.Second      // to dial a peer and send the HELLO, in the background
	poolBackoff       = time.Second      // after a failed refill, leave that host alone this long
	standbyLimit      = 2 * poolMaxAge   // the acceptor's agent drops a pooled connection idle this long
	maxStandbyPerHost = 4 * poolSize     // pooled connections one sending host may keep waiting
)

// pooledConn is an authenticated connection to a peer's broker port that
// waits for an OFFER.
type pooledConn struct {
	c  *net.TCPConn
	at time.Time // when it was dialed
}

// offerPool is the connector side: pooled connections by the peer's
// fabric address.
type offerPool struct {
	a      *Agent
	refill chan directory.Host // hosts whose pool an offer drew from

	mu      sync.Mutex // guards idle and backoff
	idle    map[string][]pooledConn
	backoff map[string]time.Time // fabric address -> no refill before
}

func newOfferPool(a *Agent) *offerPool {
	return &offerPool{a: a, refill: make(chan directory.Host, 64), idle: map[string][]pooledConn{}, backoff: map[string]time.Time{}}
}

// take returns an open pooled connection to h, or nil, and asks for the
// pool to be refilled either way.
func (p *offerPool) take(h directory.Host) *net.TCPConn {
	select {
	case p.refill <- h:
	default: // a refill is queued already
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	for q := p.idle[h.FabricIP]; len(q) > 0; q = p.idle[h.FabricIP] {
		pc := q[0]
		p.idle[h.FabricIP] = q[1:]
		if now.Sub(pc.at) < poolMaxAge && stillOpen(pc.c) {
			return pc.c
		}
		pc.c.Close()
	}
	return nil
}

// run refills pools on demand and retires old connections until ctx is
// done, then closes every pooled connection.
func (p *offerPool) run(ctx context.Context) {
	defer p.a.wg.Done()
	tick := time.NewTicker(poolMaxAge / 2)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			p.retire(time.Time{})
			return
		case h := <-p.refill:
			p.fill(h)
		case now := <-tick.C:
			p.retire(now.Add(-poolMaxAge))
		}
	}
}

// fill dials h until its pool holds poolSize connections; a failure stops
// it, and refills of h, for poolBackoff (offers then dial themselves).
func (p *offerPool) fill(h directory.Host) {
	for {
		p.mu.Lock()
		full := len(p.idle[h.FabricIP]) >= poolSize || time.Now().Before(p.backoff[h.FabricIP])
		p.mu.Unlock()
		if full {
			return
		}
		c, err := p.a.dialStandby(h)
		p.mu.Lock()
		if err != nil {
			p.backoff[h.FabricIP] = time.Now().Add(poolBackoff)
		} else {
			delete(p.backoff, h.FabricIP)
			p.idle[h.FabricIP] = append(p.idle[h.FabricIP], pooledConn{c: c, at: time.Now()})
		}
		p.mu.Unlock()
		if err != nil {
			p.a.log.Info("pool a connection to a peer agent; its offers dial when needed", "host", h.Name, "err", err)
			return
		}
	}
}

// retire closes the pooled connections dialed before cutoff, and those
// found closed; the zero cutoff closes them all.
func (p *offerPool) retire(cutoff time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for addr, q := range p.idle {
		kept := q[:0]
		for _, pc := range q {
			if !cutoff.IsZero() && pc.at.After(cutoff) && stillOpen(pc.c) {
				kept = append(kept, pc)
			} else {
				pc.c.Close()
			}
		}
		if len(kept) == 0 {
			delete(p.idle, addr)
		} else {
			p.idle[addr] = kept
		}
	}
}

// dialStandby dials h's broker port and sends the signed HELLO that lets
// the connection wait there for an OFFER.
func (a *Agent) dialStandby(h directory.Host) (*net.TCPConn, error) {
	key := a.clusterKey()
	if key == nil {
		return nil, errors.New("no cluster key yet")
	}
	deadline := time.Now().Add(poolDialLimit)
	c, err := a.dialBroker(h, deadline)
	if err != nil {
		return nil, err
	}
	hello := protocol.New(protocol.TypeHello, 1, protocol.String(protocol.AttrHost, a.cfg.Host), newNonce(), timeAttr(time.Now()))
	if err = sign(key, hello); err == nil {
		c.SetDeadline(deadline)
		err = writeFrame(c, hello)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("send HELLO: %w", err)
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// stillOpen reports whether c can carry an OFFER: the peer has neither
// closed nor reset it, nor sent anything (an agent says nothing before
// the OFFER; an ERROR there means it refused the HELLO).
func stillOpen(c *net.TCPConn) bool {
	raw, err := c.SyscallConn()
	if err != nil {
		return false
	}
	open := false
	raw.Control(func(fd uintptr) {
		var b [1]byte
		_, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		open = errors.Is(err, unix.EAGAIN)
	})
	return open
}

// standbys counts, per sending host, the pooled connections that wait
// on this agent for an OFFER (the acceptor side).
type standbys struct {
	mu sync.Mutex
	n  map[string]int
}

func newStandbys() *standbys { return &standbys{n: map[string]int{}} }

// enter admits one more waiting connection from host, unless it has
// maxStandbyPerHost already.
func (s *standbys) enter(host string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[host] >= maxStandbyPerHost {
		return false
	}
	s.n[host]++
	return true
}

func (s *standbys) leave(host string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n[host]--; s.n[host] <= 0 {
		delete(s.n, host)
	}
}

// standby serves the HELLO that opens a pooled connection: once it
// authenticates, the connection leaves the bounded set of offers in
// flight (release) and waits, at most standbyLimit, for the one OFFER it
// will carry, which it returns. The agent shutting down ends the wait.
func (a *Agent) standby(ctx context.Context, c *net.TCPConn, hello *protocol.Message, release func()) (*protocol.Message, error) {
	sender, _, err := a.checkSigned(c, hello, protocol.TypeHello)
	if err == nil && !a.standbys.enter(sender.Name) {
		err = fmt.Errorf("host %s already keeps %d pooled connections here", sender.Name, maxStandbyPerHost)
	}
	if err != nil {
		a.log.Warn("pooled fabric connection refused", "from", c.RemoteAddr().String(), "err", err)
		writeFrame(c, protocol.ErrorMessage(hello.Seq, protocol.Errorf(protocol.CodeDenied, "%v", err)))
		return nil, err
	}
	defer a.standbys.leave(sender.Name)
	release()
	// The OFFER must not wait for this ACK behind Nagle on the connector.
	quickAck(c)
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	c.SetDeadline(time.Now().Add(standbyLimit))
	m, err := readFrame(c)
	if err != nil {
		return nil, fmt.Errorf("pooled connection from %s ended before an OFFER: %w", sender.Name, err)
	}
	c.SetDeadline(time.Now().Add(offerReadLimit))
	return m, nil
}
