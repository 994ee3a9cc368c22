package agent

import (
	"github.com/freeflow-net/freeflow/internal/protocol"
	"golang.org/x/sys/unix"
)

const verbsPage = 4096 // the unit of a region's segments

// verbsMRReg registers a region: its memfds, one per segment.
func (s *session) verbsMRReg(m *protocol.Message) (*protocol.Message, error) {
	mr, err := m.VerbsMR()
	if err != nil {
		return nil, err
	}
	segs, err := m.Segments()
	if err != nil {
		return nil, err
	}
	if len(s.inFDs) != len(segs) {
		return nil, protocol.Errorf(protocol.CodeInvalid,
			"VERBS_MR_REG carries %d file descriptors and %d segments; send one memfd per segment, in order", len(s.inFDs), len(segs))
	}
	if err := checkRegion(mr, segs, s.inFDs); err != nil {
		return nil, err
	}
	reg := &vmr{container: s.self.ID, owner: s, mr: mr, segs: segs}
	if err := s.a.verbs.addMR(reg, s.inFDs); err != nil {
		return nil, err
	}
	return protocol.New(protocol.TypeOK, m.Seq, protocol.U32(protocol.AttrRKey, reg.rkey)), nil
}

// checkRegion checks that the segments, in the memfds fds, map exactly the
// pages of the region mr: [floor(addr), ceil(addr + len)) to 4 KiB.
func checkRegion(mr protocol.VerbsMR, segs []protocol.Segment, fds []int) error {
	first := mr.Addr &^ (verbsPage - 1)
	if mr.Len == 0 || mr.Addr+mr.Len < mr.Addr || mr.Addr+mr.Len > ^uint64(0)-verbsPage {
		return protocol.Errorf(protocol.CodeInvalid, "region at %#x of %d bytes is empty or runs past the address space", mr.Addr, mr.Len)
	}
	pages := (mr.Addr+mr.Len+verbsPage-1)&^(verbsPage-1) - first
	var sum uint64
	writable := mr.Access&(protocol.AccessRemoteWrite|protocol.AccessRemoteAtomic) != 0
	for i, sg := range segs {
		size, seals, err := sealedMemfd(fds[i], "a region's descriptor")
		if err != nil {
			return err
		}
		// A read-only grant must be read-only for a hostile peer too: it
		// could reopen the fd for writing through /proc (a memfd is mode
		// 0777), but not write a memfd sealed F_SEAL_FUTURE_WRITE.
		if !writable && seals&unix.F_SEAL_FUTURE_WRITE == 0 {
			return protocol.Errorf(protocol.CodeInvalid,
				"segment %d of a region without remote write or atomic access is not sealed F_SEAL_FUTURE_WRITE (seals %#x): seal it once the owner has mapped it", i, seals)
		}
		if sg.Len == 0 || sg.Len%verbsPage != 0 || sg.Offset%verbsPage != 0 ||
			sg.Offset > uint64(size) || sg.Len > uint64(size)-sg.Offset {
			return protocol.Errorf(protocol.CodeInvalid,
				"segment %d (offset %d, %d bytes) is not whole 4 KiB pages within its memfd of %d bytes", i, sg.Offset, sg.Len, size)
		}
		sum += sg.Len // each within a memfd: no wrap
	}
	if sum != pages {
		return protocol.Errorf(protocol.CodeInvalid,
			"the segments hold %d bytes, the region's pages [%#x, %#x) %d: send segments that map exactly those pages", sum, first, first+pages, pages)
	}
	return nil
}

// addMR keys reg with a random rkey unique in its container and keeps it
// with its memfds fds, within the container's limits.
func (r *verbsRegistry) addMR(reg *vmr, fds []int) error {
	fdShare := r.fdShare()
	r.mu.Lock()
	defer r.mu.Unlock()
	mrs := r.mrs[reg.container]
	if len(mrs) >= r.maxMRs {
		return protocol.Errorf(protocol.CodeLimit,
			"container %s holds %d memory regions, its limit; deregister some (ibv_dereg_mr) before registering more", reg.container, r.maxMRs)
	}
	var err error
	if reg.files, reg.fds, err = r.holdFilesLocked(reg.container, fds, fdShare); err != nil {
		return err
	}
	if mrs == nil {
		mrs = map[uint32]*vmr{}
		r.mrs[reg.container] = mrs
	}
	for reg.rkey = randomKey(); mrs[reg.rkey] != nil; reg.rkey = randomKey() {
	}
	mrs[reg.rkey] = reg
	r.ownedLocked(reg.owner).mrs[reg.rkey] = reg
	return nil
}

// dropMRLocked removes reg from the registry; the caller releases its
// files.
func (r *verbsRegistry) dropMRLocked(reg *vmr) {
	if mrs := r.mrs[reg.container]; mrs[reg.rkey] == reg {
		if delete(mrs, reg.rkey); len(mrs) == 0 {
			delete(r.mrs, reg.container)
		}
	}
	if o := r.owned[reg.owner]; o != nil {
		delete(o.mrs, reg.rkey)
	}
}

// verbsMRDereg forgets the caller's region.
func (s *session) verbsMRDereg(m *protocol.Message) (*protocol.Message, error) {
	rkey, err := m.U32(protocol.AttrRKey)
	if err != nil {
		return nil, err
	}
	r := s.a.verbs
	r.mu.Lock()
	var reg *vmr
	if o := r.owned[s]; o != nil {
		reg = o.mrs[rkey]
	}
	if reg != nil {
		r.dropMRLocked(reg)
		r.releaseFilesLocked(reg.container, reg.files)
	}
	r.mu.Unlock()
	return protocol.New(protocol.TypeOK, m.Seq), nil
}

// verbsMRGet grants the region behind an rkey through the caller's QP:
// only a region of the session that owns the QP it is connected to, in
// that QP's protection domain.
func (s *session) verbsMRGet(m *protocol.Message) (*protocol.Message, error) {
	qpn, err := m.U32(protocol.AttrQPN)
	if err != nil {
		return nil, err
	}
	rkey, err := m.U32(protocol.AttrRKey)
	if err != nil {
		return nil, err
	}
	reg, fds, err := s.a.verbs.grant(s, qpn, rkey)
	if err != nil {
		return nil, err
	}
	s.outFDs = fds
	mr := reg.mr
	mr.PD = 0 // the owner's number, nothing to the initiator
	return protocol.New(protocol.TypeVerbsMRGrant, m.Seq, mr.Attr(), protocol.Segments(reg.segs)), nil
}

// grant returns the region rkey as the caller's QP qpn may reach it, and
// the descriptors to hand over: read-only unless the region allows remote
// writes or atomics.
func (r *verbsRegistry) grant(s *session, qpn, rkey uint32) (*vmr, []int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	own, err := r.ownQPLocked(s, qpn)
	if err != nil {
		return nil, nil, err
	}
	peer := own.peer
	if peer == nil || r.qps[peer.qpn] != peer || peer.peer != own {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound, "QP %#x is connected to no live QP connected back to it (VERBS_CONNECT on both sides first): no region is reachable through it", qpn)
	}
	reg := r.mrs[peer.container][rkey]
	if reg == nil || reg.owner != peer.owner || reg.mr.PD != peer.pd {
		return nil, nil, protocol.Errorf(protocol.CodeNotFound,
			"rkey %#x names no region of QP %#x's process in its protection domain (remote access error)", rkey, peer.qpn)
	}
	writable := reg.mr.Access&(protocol.AccessRemoteWrite|protocol.AccessRemoteAtomic) != 0
	var fds []int
	for _, fd := range reg.fds {
		open := reopenReadOnly
		if writable {
			open = dupFD
		}
		nfd, err := open(fd)
		if err != nil {
			protocol.CloseFDs(fds)
			return nil, nil, err
		}
		fds = append(fds, nfd)
	}
	return reg, fds, nil
}
