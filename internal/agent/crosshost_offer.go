package agent

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/freeflow-net/freeflow/internal/protocol"
)

// OFFER, its PATH reply and the COMMIT (PROTOCOL.md, "Cross-host offers")
// travel on a TCP stream, so each message is framed by its own header:
// read 12 bytes, then exactly the payload length, and never a byte more,
// because what follows the reply and the COMMIT on that connection is the
// application's data.

// Bounds of the cross-host exchange. The connector's agent has offerBudget
// from its CONNECT to its COMMIT; the acceptor's agent waits at most
// offerWait for its local ACCEPT inside it, and the library waits longer
// than both for any answer (lib/src/agent/session.c), so a scheduling delay
// under load costs margin, not agreement.
const (
	DefaultBrokerPort = 7947
	offerBudget       = 150 * time.Millisecond // the connector's agent: dial, offer, reply, COMMIT
	offerWait         = 40 * time.Millisecond  // the acceptor's agent: wait for its ACCEPT
	commitWait        = time.Second            // the acceptor's agent: wait for COMMIT after a fast PATH
	offerReadLimit    = time.Second            // a peer that sends no offer is dropped
	offerClockSkew    = 30 * time.Second       // TIME must be this close to our clock
	maxOffersInFlight = 256
)

// writeFrame sends m on a stream.
func writeFrame(w io.Writer, m *protocol.Message) error {
	b, err := protocol.Encode(m)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// readFrame reads exactly one message from a stream. The buffer is sized
// to the message (about 100 bytes), not to MaxMessage: a 64 KiB buffer per
// frame made the garbage collector the agent's largest cost under a high
// connection rate.
func readFrame(r io.Reader) (*protocol.Message, error) {
	var hdr [protocol.HeaderSize]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, fmt.Errorf("read message header: %w", err)
	}
	n := binary.LittleEndian.Uint32(hdr[8:])
	if n > protocol.MaxPayload {
		return nil, protocol.Errorf(protocol.CodeBadMsg, "message length %d exceeds the limit", n)
	}
	buf := make([]byte, protocol.HeaderSize+int(n))
	copy(buf, hdr[:])
	if _, err := io.ReadFull(r, buf[protocol.HeaderSize:]); err != nil {
		return nil, fmt.Errorf("read message payload: %w", err)
	}
	return protocol.Decode(buf)
}

// commitMessage is the connector agent's COMMIT of the offer with nonce:
// its fast PATH is taken, the connection goes to the connecting library.
func commitMessage(key, nonce []byte, seq uint32) (*protocol.Message, error) {
	m := protocol.New(protocol.TypeCommit, seq, protocol.Attr{Type: protocol.AttrNonce, Value: nonce})
	return m, sign(key, m)
}

// checkCommit accepts only a COMMIT signed with key that carries the
// offer's nonce.
func checkCommit(key, nonce []byte, m *protocol.Message) error {
	if m.Type != protocol.TypeCommit {
		return fmt.Errorf("%v after a fast PATH, want COMMIT", m.Type)
	}
	if err := verify(key, m); err != nil {
		return err
	}
	if got, _ := m.Get(protocol.AttrNonce); !hmac.Equal(got, nonce) {
		return fmt.Errorf("COMMIT does not carry the offer's nonce")
	}
	return nil
}

// sign appends the MAC attribute: HMAC-SHA256 under key over the message
// encoded without it.
func sign(key []byte, m *protocol.Message) error {
	mac, err := macOf(key, m)
	if err != nil {
		return err
	}
	m.Attrs = append(m.Attrs, protocol.Attr{Type: protocol.AttrMAC, Value: mac})
	return nil
}

// verify checks and removes the MAC attribute of m.
func verify(key []byte, m *protocol.Message) error {
	got, ok := m.Get(protocol.AttrMAC)
	if !ok {
		return fmt.Errorf("%v carries no MAC", m.Type)
	}
	rest := *m
	rest.Attrs = nil
	for _, a := range m.Attrs {
		if a.Type != protocol.AttrMAC {
			rest.Attrs = append(rest.Attrs, a)
		}
	}
	want, err := macOf(key, &rest)
	if err != nil {
		return err
	}
	if !hmac.Equal(got, want) {
		return fmt.Errorf("%v MAC does not verify: the sender does not hold this cluster's key", m.Type)
	}
	*m = rest
	return nil
}

func macOf(key []byte, m *protocol.Message) ([]byte, error) {
	b, err := protocol.Encode(m)
	if err != nil {
		return nil, err
	}
	h := hmac.New(sha256.New, key)
	h.Write(b)
	return h.Sum(nil), nil
}

func newNonce() protocol.Attr {
	n := make([]byte, 16)
	rand.Read(n)
	return protocol.Attr{Type: protocol.AttrNonce, Value: n}
}

func timeAttr(t time.Time) protocol.Attr {
	return protocol.Attr{Type: protocol.AttrTime, Value: binary.LittleEndian.AppendUint64(nil, uint64(t.UnixMilli()))}
}

// checkTime refuses an offer whose TIME is missing or too far from now.
func checkTime(m *protocol.Message, now time.Time) error {
	v, ok := m.Get(protocol.AttrTime)
	if !ok {
		return fmt.Errorf("OFFER carries no TIME")
	}
	t := time.UnixMilli(int64(binary.LittleEndian.Uint64(v)))
	if d := now.Sub(t); d > offerClockSkew || d < -offerClockSkew {
		return fmt.Errorf("OFFER TIME is %v away from this host's clock (more than %v): a replay, or the clocks disagree", d.Round(time.Millisecond), offerClockSkew)
	}
	return nil
}

// nonces remembers the nonces of recent offers, so a recorded offer
// replayed within the clock window is refused.
type nonces struct {
	mu        sync.Mutex
	seen      map[[16]byte]time.Time
	lastPrune time.Time
}

func newNonces() *nonces { return &nonces{seen: map[[16]byte]time.Time{}} }

// fresh records nonce n and reports whether it was new.
func (s *nonces) fresh(n []byte, now time.Time) bool {
	var k [16]byte
	if len(n) != len(k) {
		return false
	}
	copy(k[:], n)
	s.mu.Lock()
	defer s.mu.Unlock()
	if now.Sub(s.lastPrune) > time.Second {
		s.lastPrune = now
		for old, at := range s.seen {
			if now.Sub(at) > 2*offerClockSkew {
				delete(s.seen, old)
			}
		}
	}
	if _, dup := s.seen[k]; dup {
		return false
	}
	s.seen[k] = now
	return true
}
