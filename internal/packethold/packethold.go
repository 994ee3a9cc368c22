// Package packethold holds the packets arriving in a network namespace
// and lets them all in, or drops them, at once: while a migrated
// container's processes are restored, its peers' packets wait in the
// kernel instead of meeting a namespace with no sockets (which would reset
// the connections) or being lost (which costs the peers a retransmission
// timeout, 200 ms at least and doubling). docs/ARCHITECTURE.md,
// "Control flow: migrating a container".
//
// The kernel's NFQUEUE does the holding: an iptables rule queues the
// namespace's input from its interface, and a netlink socket bound to the
// queue gives the verdicts (nfnetlink_queue; the nft "queue" statement is
// not in every kernel, the iptables target through nft's compatibility
// layer is). A packet the queue cannot take, or that is queued with no
// one bound, is dropped, never let through.
package packethold

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"github.com/freeflow-net/freeflow/internal/netns"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// Queue is the NFQUEUE number; queues are per network namespace.
const Queue = 4646

// maxLen bounds the packets held (the kernel drops beyond: the peers, TCP
// backing off, retransmit them); each pins a packet's kernel memory. A
// peer with a burst in flight fills a hold fast: with 4096, a client
// writing 1-4 MiB values through a move made the other peers' packets be
// dropped, and their replies waited a retransmission timeout (1.2 s
// against the move's 0.3).
const maxLen = 16384

// nfnetlink_queue's messages and attributes (linux/netfilter/nfnetlink_queue.h).
const (
	subsysQueue   = 3
	msgPacket     = 0
	msgConfig     = 2
	msgVerdictBat = 3

	attrPacketHdr   = 1
	attrVerdictHdr  = 2
	attrCfgCmd      = 1
	attrCfgParams   = 2
	attrCfgQueueMax = 3

	cmdBind   = 1
	copyMeta  = 1
	nfDrop    = 0
	nfAccept  = 1
	nfnlV0    = 0
	afInet    = unix.AF_INET
	batchSkip = 1 << 30 // a batch verdict's id this far past the last seen covers every packet queued
)

// Hold is the holding of one namespace's input.
type Hold struct {
	ns, dev string
	c       *netlink.Conn

	mu     sync.Mutex
	last   uint32 // id of the last packet seen
	held   int
	closed bool
	done   chan struct{}
}

// Start queues every IPv4 packet that arrives on dev in network namespace
// ns, and every one the namespace sends out of it, until Release or Drop:
// a restore that fails late kills its processes, whose sockets' last
// words (FIN, RST) must not reach the peers of the copy that lives on.
func Start(ns, dev string) (*Hold, error) {
	h := &Hold{ns: ns, dev: dev, done: make(chan struct{})}
	err := netns.Do(netns.Path(ns), func() error {
		c, err := netlink.Dial(unix.NETLINK_NETFILTER, nil)
		h.c = c
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("open a netfilter queue socket in %s: %w", ns, err)
	}
	if err := h.configure(); err != nil {
		h.c.Close()
		return nil, fmt.Errorf("bind netfilter queue %d in %s: %w", Queue, ns, err)
	}
	go h.read()
	h.removeRules() // left by a CLI that died holding: they would hold the packets twice
	for i, r := range h.rules() {
		if err := h.iptables("-I", r); err != nil {
			for _, done := range h.rules()[:i] {
				_ = h.iptables("-D", done)
			}
			h.c.Close()
			<-h.done
			return nil, err
		}
	}
	return h, nil
}

func (h *Hold) configure() error {
	cmd := make([]byte, 4)
	cmd[0] = cmdBind
	binary.BigEndian.PutUint16(cmd[2:], afInet)
	if err := h.config(netlink.Attribute{Type: attrCfgCmd, Data: cmd}); err != nil {
		return err
	}
	params := make([]byte, 5) // copy_range 0, copy_mode META: the ids are all that is needed
	params[4] = copyMeta
	maxlen := binary.BigEndian.AppendUint32(nil, maxLen)
	if err := h.config(netlink.Attribute{Type: attrCfgParams, Data: params}, netlink.Attribute{Type: attrCfgQueueMax, Data: maxlen}); err != nil {
		return err
	}
	// A reader that falls behind must not make the kernel drop what it
	// holds: room for every packet's message, and no ENOBUFS.
	if err := h.c.SetReadBuffer(maxLen * 256); err != nil {
		return err
	}
	return h.c.SetOption(netlink.NoENOBUFS, true)
}

// config sends a configuration message and waits for its ack (before
// read runs).
func (h *Hold) config(attrs ...netlink.Attribute) error {
	m, err := message(msgConfig, attrs...)
	if err != nil {
		return err
	}
	m.Header.Flags |= netlink.Acknowledge
	_, err = h.c.Execute(m)
	return err
}

// message is one nfqueue message for Queue.
func message(msg uint16, attrs ...netlink.Attribute) (netlink.Message, error) {
	b, err := netlink.MarshalAttributes(attrs)
	if err != nil {
		return netlink.Message{}, err
	}
	hdr := []byte{afInet, nfnlV0, 0, 0}
	binary.BigEndian.PutUint16(hdr[2:], Queue)
	return netlink.Message{
		Header: netlink.Header{Type: netlink.HeaderType(subsysQueue<<8 | msg), Flags: netlink.Request},
		Data:   append(hdr, b...),
	}, nil
}

// read notes the id of every packet queued. An error (a batch verdict on
// an empty queue answers ENOENT) does not end it: only Close does.
func (h *Hold) read() {
	defer close(h.done)
	for {
		msgs, err := h.c.Receive()
		if err != nil {
			h.mu.Lock()
			closed := h.closed
			h.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		for _, m := range msgs {
			if m.Header.Type&0xff != msgPacket || int(m.Header.Type>>8) != subsysQueue || len(m.Data) < 4 {
				continue
			}
			ad, err := netlink.NewAttributeDecoder(m.Data[4:])
			if err != nil {
				continue
			}
			for ad.Next() {
				if ad.Type() == attrPacketHdr && len(ad.Bytes()) >= 4 {
					h.mu.Lock()
					h.last = binary.BigEndian.Uint32(ad.Bytes())
					h.held++
					h.mu.Unlock()
				}
			}
		}
	}
}

// Release lets every packet held so far through, in order, and stops
// holding what the namespace sends (its processes, about to run, answer
// at once). Packets still arriving wait for Close: removing the input rule
// (an iptables run) need not delay them.
func (h *Hold) Release() (int, error) {
	h.mu.Lock()
	held := h.held
	h.mu.Unlock()
	if err := h.verdict(nfAccept); err != nil {
		return held, err
	}
	err := h.removeRule(h.rules()[1])
	return held, errors.Join(err, h.verdict(nfAccept)) // and what left meanwhile
}

// Close stops holding and lets in what still arrived after Release.
func (h *Hold) Close() error {
	_, err := h.end(nfAccept)
	return err
}

// Drop drops every packet held and stops holding: for a restore that did
// not happen, whose peers must retransmit to where the container is.
func (h *Hold) Drop() (int, error) { return h.end(nfDrop) }

// verdict gives every packet queued so far, seen by read or not yet, the
// verdict.
func (h *Hold) verdict(verdict uint32) error {
	h.mu.Lock()
	v := make([]byte, 8)
	binary.BigEndian.PutUint32(v, verdict)
	binary.BigEndian.PutUint32(v[4:], h.last+batchSkip)
	h.mu.Unlock()
	m, err := message(msgVerdictBat, netlink.Attribute{Type: attrVerdictHdr, Data: v})
	if err == nil {
		_, err = h.c.Send(m)
	}
	if err != nil {
		return fmt.Errorf("let the held input of %s in: %w", h.ns, err)
	}
	return nil
}

func (h *Hold) end(verdict uint32) (int, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return 0, nil
	}
	h.closed = true
	held := h.held
	h.mu.Unlock()
	// No packet joins the queue once the rule is gone; the verdict then
	// covers every one in it.
	errRule := h.removeRules()
	errVerdict := h.verdict(verdict)
	h.c.Close()
	<-h.done
	if err := errors.Join(errRule, errVerdict); err != nil {
		return held, fmt.Errorf("end the holding of %s's input: %w", h.ns, err)
	}
	return held, nil
}

// rules are the iptables rules that queue the namespace's traffic on dev.
// With --queue-bypass a rule no one reads (its CLI died) lets traffic
// through instead of dropping it for ever.
func (h *Hold) rules() [][]string {
	q := []string{"-j", "NFQUEUE", "--queue-num", fmt.Sprint(Queue), "--queue-bypass"}
	return [][]string{append([]string{"INPUT", "-i", h.dev}, q...), append([]string{"OUTPUT", "-o", h.dev}, q...)}
}

// removeRules deletes every copy of the rules; none there is no error.
func (h *Hold) removeRules() error {
	var errs []error
	for _, r := range h.rules() {
		errs = append(errs, h.removeRule(r))
	}
	return errors.Join(errs...)
}

// removeRule deletes every copy of rule; none there is no error.
func (h *Hold) removeRule(rule []string) error {
	for n := 0; ; n++ {
		err := h.iptables("-D", rule)
		if err == nil {
			continue
		}
		if n == 0 && !strings.Contains(err.Error(), "does a matching rule exist") && !strings.Contains(err.Error(), "No chain/target/match") {
			return err
		}
		return nil
	}
}

// iptables adds (-I) or removes (-D) rule.
func (h *Hold) iptables(op string, rule []string) error {
	args := append([]string{"-w", op}, rule...)
	if out, err := netns.Command(netns.Path(h.ns), "iptables", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("iptables %s in %s: %w: %s", strings.Join(args, " "), h.ns, err, strings.TrimSpace(string(out)))
	}
	return nil
}
