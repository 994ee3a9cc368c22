package agent

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The fabric guard (docs/PROTOCOL.md, "What a handed fabric socket can
// reach"). Every fabric socket the agent hands to a container's library
// lives in the host's network namespace, and Linux lets its holder
// disconnect it (connect with AF_UNSPEC) and connect it again to anything
// the host can reach: an escape from the container onto the host network.
// The agent therefore marks each handed socket with SO_MARK, and rules in
// an nftables output chain of the host keep marked sockets from opening
// new connections. The mark holds only against a process that cannot change
// it: that takes CAP_NET_ADMIN, or since Linux 5.17 CAP_NET_RAW, in the
// user namespace that owns the host's network namespace, so the agent
// hands no fabric socket to a process that could (mayClearMark).
const (
	// fabricMarkConnected marks a handed, connected socket: it may send no
	// segment with SYN set, so it can neither connect again nor accept.
	fabricMarkConnected = 0x4646
	// fabricMarkListener marks a handed listener: it may send no SYN
	// without ACK, so it still accepts (SYN-ACK) but cannot connect out.
	fabricMarkListener = 0x4647
)

// markConnected marks a connected fabric socket before it is handed, so
// that the guard rules stop it from connecting anywhere else.
func markConnected(fd int) error {
	return setFabricMark(fd, fabricMarkConnected)
}

// markListener marks a listening fabric socket before it is handed, so
// that it can still accept connections but never connect out.
func markListener(fd int) error {
	return setFabricMark(fd, fabricMarkListener)
}

// Overlay reasons of a cross-host connection that would hand a fabric
// socket the guard cannot hold.
const (
	// reasonNoGuard: this agent could not install its guard rules.
	reasonNoGuard = "no-fabric-guard"
	// reasonMayClearMark: the process on this side could change the mark
	// (mayClearMark).
	reasonMayClearMark = "caller-may-clear-mark"
)

// guardTable is the agent's own nftables table, of the inet family (IPv4
// and IPv6 alike, though handed fabric sockets are IPv4 TCP sockets, which
// can reach IPv4 addresses only).
var guardTable = &nftables.Table{Family: nftables.TableFamilyINet, Name: "freeflow-agent"}

// guardChain sees every packet the host sends. Where it stands among the
// host firewall's own output chains does not matter: in nftables every
// base chain on a hook sees the packet unless an earlier one drops it, an
// accept ends only its own chain, and a drop is final.
var guardChain = &nftables.Chain{
	Table:    guardTable,
	Name:     "output",
	Type:     nftables.ChainTypeFilter,
	Hooknum:  nftables.ChainHookOutput,
	Priority: nftables.ChainPriorityFilter,
}

// guardRules are the guard's rules. A marked connection sends no segment
// with SYN set (no connect, and no SYN-ACK should it be turned into a
// listener); a marked listener sends no SYN without ACK (it answers
// connections, it opens none):
//
//	meta mark 0x4646 tcp flags & syn == syn drop
//	meta mark 0x4647 tcp flags & (fin|syn|rst|ack) == syn drop
func guardRules() [][]expr.Any {
	return [][]expr.Any{
		markedTCPFlags(fabricMarkConnected, tcpSYN, tcpSYN),
		markedTCPFlags(fabricMarkListener, tcpFIN|tcpSYN|tcpRST|tcpACK, tcpSYN),
	}
}

// TCP header flags, in the byte at offset 13 of the header.
const (
	tcpFIN = 0x01
	tcpSYN = 0x02
	tcpRST = 0x04
	tcpACK = 0x10
)

// markedTCPFlags drops TCP packets of sockets marked mark whose flags,
// masked with mask, are want: the expressions nft makes of "meta mark MARK
// tcp flags & MASK == WANT drop".
func markedTCPFlags(mark uint32, mask, want byte) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(mark)},
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 13, Len: 1},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 1, Mask: []byte{mask}, Xor: []byte{0}},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{want}},
		&expr.Verdict{Kind: expr.VerdictDrop},
	}
}

// installFabricGuard installs the guard's table in the calling thread's
// network namespace, over netlink (the agent's image has no iptables or
// nft program): the netlink socket is opened on this goroutine's thread,
// which netns.Do or the agent's own namespace put in place. One batch adds
// the table, deletes it with whatever a predecessor left in it, and adds
// it again with the chain and rules; the kernel applies a batch whole or
// not at all, so a restarted agent ends with exactly one copy and the
// guard is never down in between. The table is never removed: its rules
// touch only marked sockets, and the namespaces of a `freeflow cluster`
// are removed with it by `freeflow cluster down`.
func installFabricGuard() error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("open a netfilter netlink socket: %w", err)
	}
	c.AddTable(guardTable)
	c.DelTable(guardTable)
	c.AddTable(guardTable)
	c.AddChain(guardChain)
	for _, r := range guardRules() {
		c.AddRule(&nftables.Rule{Table: guardTable, Chain: guardChain, Exprs: r})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("add nftables table inet %s: %w (the agent needs CAP_NET_ADMIN, and a kernel with nf_tables)", guardTable.Name, err)
	}
	return nil
}

// guardFabric installs the guard when the configuration asks for it, and
// finds the user namespace whose processes mayClearMark looks at. An
// agent that cannot (guardErr set) hands no fabric socket and serves
// everything else; STATUS says why.
func (a *Agent) guardFabric() {
	if !a.cfg.FabricGuard {
		return
	}
	err := a.cfg.installGuard()
	if err == nil {
		a.markNS, err = netnsOwner()
	}
	if err != nil {
		a.guardErr = fmt.Sprintf("install the fabric guard: %v; cross-host fast paths use the overlay (%s)", err, reasonNoGuard)
		a.log.Warn(a.guardErr)
	}
}

// fabricRefusal returns why no fabric socket may go to process pid: this
// agent has no guard, or pid could clear the mark; "" if one may.
func (a *Agent) fabricRefusal(pid int32) string {
	switch {
	case a.guardErr != "":
		return reasonNoGuard
	case a.mayClearMark(pid):
		return reasonMayClearMark
	}
	return ""
}

// acceptorRefusal is fabricRefusal for the accepting side of m, a meeting
// on listener li that an offer is about to complete (the guard is known to
// be installed): the process whose ACCEPT is there or, for a parked
// meeting, every process that registered the listener, one of which is
// expected to claim the half.
func (a *Agent) acceptorRefusal(m *meeting, li *listenerInfo) string {
	a.rv.mu.Lock()
	pids, parked := []int32{m.libs[sideAcceptor].pid}, m.park
	a.rv.mu.Unlock()
	if parked {
		pids = li.pids
	}
	for _, pid := range pids {
		if a.mayClearMark(pid) {
			return reasonMayClearMark
		}
	}
	return ""
}

// markCaps are the capabilities that let a process change SO_MARK.
const markCaps = 1<<unix.CAP_NET_ADMIN | 1<<unix.CAP_NET_RAW

// mayClearMark reports whether process pid could change the mark of a
// fabric socket handed to it, when the guard is configured: whether it
// lives in a.markNS, the user namespace that owns the host's network
// namespace (a process in another holds its capabilities only over
// namespaces its own owns, and the host's is none of them), and holds
// CAP_NET_ADMIN or CAP_NET_RAW in its permitted set (it can raise them at
// once), its bounding set (an exec as root regains them) or its
// inheritable set (an exec of a program with file capabilities does). A
// process that cannot be read may. Read afresh on every call (some 35 µs,
// against the 350 µs of agent CPU a cross-host connection costs): a
// cached answer would outlive its pid.
//
// The answer is about one process: a container that holds these
// capabilities anywhere can still pass a handed socket to a process of its
// own that has them. That is why `freeflow run` gives its containers
// neither (internal/container/spec.go).
func (a *Agent) mayClearMark(pid int32) bool {
	if !a.cfg.FabricGuard {
		return false
	}
	if ns, err := nsOfPath(fmt.Sprintf("/proc/%d/ns/user", pid)); err == nil && ns != a.markNS {
		return false
	}
	caps, err := capSets(pid)
	return err != nil || caps&markCaps != 0
}

// capSets returns the union of the inheritable, permitted and bounding
// capability sets of process pid (of its main thread, as
// /proc/<pid>/status shows them).
func capSets(pid int32) (uint64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	var caps uint64
	found := 0
	for _, line := range strings.Split(string(b), "\n") {
		name, hex, ok := strings.Cut(line, ":\t")
		if !ok || (name != "CapInh" && name != "CapPrm" && name != "CapBnd") {
			continue
		}
		set, err := strconv.ParseUint(hex, 16, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/status: %s: %w", pid, name, err)
		}
		caps |= set
		found++
	}
	if found != 3 {
		return 0, fmt.Errorf("/proc/%d/status lacks the capability sets", pid)
	}
	return caps, nil
}

// netnsOwner returns the user namespace that owns the agent's network
// namespace, where the fabric sockets live.
func netnsOwner() (nsKey, error) {
	f, err := os.Open("/proc/self/ns/net")
	if err != nil {
		return nsKey{}, err
	}
	defer f.Close()
	fd, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return nsKey{}, fmt.Errorf("find the user namespace that owns the network namespace (ioctl NS_GET_USERNS): %w", err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nsKey{}, fmt.Errorf("stat the user namespace of the network namespace: %w", err)
	}
	return nsKey{dev: st.Dev, ino: st.Ino}, nil
}

func setFabricMark(fd, mark int) error {
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_MARK, mark); err != nil {
		return fmt.Errorf("mark the fabric socket (SO_MARK %#x; the agent needs CAP_NET_ADMIN): %w", mark, err)
	}
	return nil
}
