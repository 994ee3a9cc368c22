package agent

// The verbs lists of CONNS (`freeflow conns --qps`, `--regions`). The
// agent is never on the data path, so what it lists of the traffic is what
// a QP's memfd says: its header's prod counter, written by the peer. It
// reads it from a read-only mapping, as a number to show and nothing else.

import (
	"cmp"
	"fmt"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/freeflow-net/freeflow/internal/agentapi"
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

// States of a QP as `freeflow conns --qps` shows them.
const (
	qpRegistered = "registered" // made, never connected
	qpConnected  = "connected"  // connected to a live QP
	qpDead       = "dead"       // its memfd is marked dead, or the QP it was connected to is gone
)

// qpSnap is a QP as the registry had it, with a use of its memfd held so
// that its header can be read after the registry's lock is released.
type qpSnap struct {
	info      agentapi.QPInfo
	container string
	fd        int
	file      fileKey
}

// qpList returns the host's QPs, sorted by container name and QPN.
func (a *Agent) qpList() []agentapi.QPInfo {
	names := a.containerNames()
	snaps := a.verbs.snapQPs(names)
	out := make([]agentapi.QPInfo, 0, len(snaps))
	for _, q := range snaps {
		dead, prod, err := readQPHeader(q.fd)
		a.verbs.releaseFiles(q.container, []fileKey{q.file})
		if err != nil {
			a.log.Warn("could not read a verbs QP's header for the listing", "qpn", q.info.QPN, "err", err)
		}
		if q.info.Type != qpTypeName(protocol.QPTypeUD) { // a UD QP's datagrams arrive in lanes, not its ring
			q.info.RxBytes = prod
		}
		if dead {
			q.info.State = qpDead
		}
		out = append(out, q.info)
	}
	slices.SortFunc(out, func(x, y agentapi.QPInfo) int {
		return cmp.Or(cmp.Compare(x.Container, y.Container), cmp.Compare(x.QPN, y.QPN))
	})
	return out
}

// snapQPs returns every QP, holding one more use of its memfd.
func (r *verbsRegistry) snapQPs(names map[string]string) []qpSnap {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]qpSnap, 0, len(r.qps))
	for _, qp := range r.qps {
		info := agentapi.QPInfo{Container: nameOf(names, qp.container), QPN: qp.qpn, Type: qpTypeName(qp.typ), Path: "shm", State: qpRegistered}
		if p := qp.peer; p != nil {
			info.PeerContainer, info.PeerQPN, info.State = nameOf(names, p.container), p.qpn, qpDead
			if r.qps[p.qpn] == p {
				info.State = qpConnected
			}
		}
		if w := qp.x.want; w.qpn != 0 { // on another host: connected once its connection is made
			info.PeerContainer, info.PeerQPN, info.Path = w.c.Name, w.qpn, "host-tcp"
			if qp.x.paired {
				info.State = qpConnected
			}
		}
		r.files[qp.container][qp.file].users++ // released by qpList
		out = append(out, qpSnap{info: info, container: qp.container, fd: qp.fd, file: qp.file})
	}
	return out
}

// readQPHeader reads a QP memfd's dead word and prod counter from a
// read-only mapping of its header page.
func readQPHeader(fd int) (bool, uint64, error) {
	mem, err := unix.Mmap(fd, 0, protocol.VQPHeaderSize, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		return false, 0, fmt.Errorf("map the QP's header page: %w", err)
	}
	defer unix.Munmap(mem)
	dead := atomic.LoadUint32((*uint32)(unsafe.Pointer(&mem[protocol.VQPOffDead]))) != 0
	return dead, atomic.LoadUint64((*uint64)(unsafe.Pointer(&mem[protocol.VQPOffProd]))), nil
}

// qpTypeName names a QP type as verbs does.
func qpTypeName(t uint32) string {
	switch t {
	case protocol.QPTypeRC:
		return "RC"
	case protocol.QPTypeUD:
		return "UD"
	}
	return fmt.Sprint(t)
}

// verbsMemList returns, per container with verbs objects, what they hold,
// sorted by container name.
func (a *Agent) verbsMemList() []agentapi.VerbsMemInfo {
	names := a.containerNames()
	limit := a.share().verbsFDs
	r := a.verbs
	r.mu.Lock()
	byID := map[string]*agentapi.VerbsMemInfo{}
	get := func(id string) *agentapi.VerbsMemInfo {
		if byID[id] == nil {
			byID[id] = &agentapi.VerbsMemInfo{Container: nameOf(names, id), MemfdLimit: limit}
		}
		return byID[id]
	}
	for id, n := range r.qpsOf {
		get(id).QPs = n
	}
	for id, mrs := range r.mrs {
		m := get(id)
		m.Regions = len(mrs)
		for _, reg := range mrs {
			m.RegionBytes += reg.mr.Len
		}
	}
	for id, files := range r.files {
		get(id).Memfds = len(files)
	}
	r.mu.Unlock()
	out := make([]agentapi.VerbsMemInfo, 0, len(byID))
	for _, m := range byID {
		out = append(out, *m)
	}
	slices.SortFunc(out, func(x, y agentapi.VerbsMemInfo) int { return cmp.Compare(x.Container, y.Container) })
	return out
}

// containerNames maps the directory's container ids to their names.
func (a *Agent) containerNames() map[string]string {
	names := map[string]string{}
	for _, c := range a.dir.Containers() {
		names[c.ID] = c.Name
	}
	return names
}

// nameOf is container id's name, or its id if the directory has it no
// longer (it is being removed).
func nameOf(names map[string]string, id string) string {
	return cmp.Or(names[id], id)
}
