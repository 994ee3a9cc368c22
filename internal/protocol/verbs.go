package protocol

import "encoding/binary"

// A verbs queue pair's memfd (docs/VERBS.md, "Queue pair memory"). The
// owning provider writes its header; the agent checks it when the QP is
// registered and sets the dead word when the owner is gone.
const (
	VQPMagic       = 0x51564646 // the bytes 46 46 56 51, "FFVQ"
	VQPVersion     = 2
	VQPHeaderSize  = 4096     // the header page; the ring follows
	VQPRingMin     = 4096     // smallest ring_size
	VQPRingMax     = 16 << 20 // largest ring_size
	VQPOffRingSize = 8        // u32 ring_size, after magic and version
	VQPOffDead     = 16       // u32: 0 while the owner reads the ring, then one of:
	VQPDeadGone    = 1        // the owner destroyed the QP or is gone
	VQPDeadReset   = 2        // the owner took the QP back to RESET: a new memfd replaced this one
	VQPOffLanes    = 24       // u32, a UD QP's: the agent adds 1 for each lane it gives it
	VQPOffProd     = 64       // u64: bytes the peer produced into the ring
)

// VerbsPeer is VERBS_PEER: the remote QP as ibv_modify_qp to RTR names it.
type VerbsPeer struct {
	QPN uint32
	LID uint16   // 0: named by GID
	GID [16]byte // all zero: named by LID
}

// VerbsQP is VERBS_QP: a QP's type (ibv_qp_type) and protection domain.
type VerbsQP struct {
	Type uint32
	PD   uint32
}

// QP types the device serves (ibv_qp_type).
const (
	QPTypeRC = 2
	QPTypeUD = 4
)

// VerbsMR is VERBS_MR: a memory region as its owner registered it.
type VerbsMR struct {
	Addr, Len uint64
	Access    uint32 // ibv_access_flags
	PD        uint32
}

// Remote access flags of ibv_access_flags that let a peer change a region.
const (
	AccessRemoteWrite  = 0x2
	AccessRemoteAtomic = 0x8
)

// Segment is one SEGMENTS entry: the part of one memfd a region maps.
type Segment struct {
	Offset, Len uint64
}

// Lane is one VERBS_LANES entry: a lane to a UD QP, by its id, and its
// sender as the agent knows it.
type Lane struct {
	ID   uint32
	From VerbsPeer
}

// Attr returns the VERBS_PEER attribute.
func (p VerbsPeer) Attr() Attr {
	return Attr{Type: AttrVerbsPeer, Value: p.append(nil)}
}

// append appends p's 24 bytes as VERBS_PEER lays them out.
func (p VerbsPeer) append(b []byte) []byte {
	b = binary.LittleEndian.AppendUint32(b, p.QPN)
	b = binary.LittleEndian.AppendUint16(b, p.LID)
	b = binary.LittleEndian.AppendUint16(b, 0)
	return append(b, p.GID[:]...)
}

// parseVerbsPeer reads the 24 bytes of a VERBS_PEER.
func parseVerbsPeer(v []byte) VerbsPeer {
	p := VerbsPeer{QPN: binary.LittleEndian.Uint32(v), LID: binary.LittleEndian.Uint16(v[4:])}
	copy(p.GID[:], v[8:24])
	return p
}

// Lanes returns the VERBS_LANES attribute: one entry per fd of its message.
func Lanes(ls []Lane) Attr {
	var b []byte
	for _, l := range ls {
		b = l.From.append(binary.LittleEndian.AppendUint32(b, l.ID))
	}
	return Attr{Type: AttrVerbsLanes, Value: b}
}

// Attr returns the VERBS_QP attribute.
func (q VerbsQP) Attr() Attr {
	b := binary.LittleEndian.AppendUint32(nil, q.Type)
	return Attr{Type: AttrVerbsQP, Value: binary.LittleEndian.AppendUint32(b, q.PD)}
}

// Attr returns the VERBS_MR attribute.
func (r VerbsMR) Attr() Attr {
	b := binary.LittleEndian.AppendUint64(nil, r.Addr)
	b = binary.LittleEndian.AppendUint64(b, r.Len)
	b = binary.LittleEndian.AppendUint32(b, r.Access)
	return Attr{Type: AttrVerbsMR, Value: binary.LittleEndian.AppendUint32(b, r.PD)}
}

// Segments returns the SEGMENTS attribute.
func Segments(segs []Segment) Attr {
	var b []byte
	for _, s := range segs {
		b = binary.LittleEndian.AppendUint64(b, s.Offset)
		b = binary.LittleEndian.AppendUint64(b, s.Len)
	}
	return Attr{Type: AttrSegments, Value: b}
}

// VerbsPeer returns VERBS_PEER, or INVALID if it is missing.
func (m *Message) VerbsPeer() (VerbsPeer, error) {
	v, err := m.fixed(AttrVerbsPeer, 24)
	if err != nil {
		return VerbsPeer{}, err
	}
	return parseVerbsPeer(v), nil
}

// VerbsQP returns VERBS_QP, or INVALID if it is missing.
func (m *Message) VerbsQP() (VerbsQP, error) {
	v, err := m.fixed(AttrVerbsQP, 8)
	if err != nil {
		return VerbsQP{}, err
	}
	return VerbsQP{Type: binary.LittleEndian.Uint32(v), PD: binary.LittleEndian.Uint32(v[4:])}, nil
}

// VerbsMR returns VERBS_MR, or INVALID if it is missing.
func (m *Message) VerbsMR() (VerbsMR, error) {
	v, err := m.fixed(AttrVerbsMR, 24)
	if err != nil {
		return VerbsMR{}, err
	}
	return VerbsMR{
		Addr: binary.LittleEndian.Uint64(v), Len: binary.LittleEndian.Uint64(v[8:]),
		Access: binary.LittleEndian.Uint32(v[16:]), PD: binary.LittleEndian.Uint32(v[20:]),
	}, nil
}

// Segments returns SEGMENTS, or INVALID if it is missing or not a whole
// number of entries (a decoded message's always is).
func (m *Message) Segments() ([]Segment, error) {
	v, ok := m.Get(AttrSegments)
	if !ok {
		return nil, m.missing(AttrSegments)
	}
	if len(v) == 0 || len(v)%segmentSize != 0 {
		return nil, Errorf(CodeInvalid, "SEGMENTS of %v must be a multiple of %d bytes", m.Type, segmentSize)
	}
	segs := make([]Segment, len(v)/segmentSize)
	for i := range segs {
		e := v[i*segmentSize:]
		segs[i] = Segment{Offset: binary.LittleEndian.Uint64(e), Len: binary.LittleEndian.Uint64(e[8:])}
	}
	return segs, nil
}

// Lanes returns VERBS_LANES: none if it is absent (an answer without
// lanes has none), INVALID if it is not a whole number of entries (a
// decoded message's always is).
func (m *Message) Lanes() ([]Lane, error) {
	v, ok := m.Get(AttrVerbsLanes)
	if !ok {
		return nil, nil
	}
	if len(v) == 0 || len(v)%LaneSize != 0 {
		return nil, Errorf(CodeInvalid, "VERBS_LANES of %v must be a multiple of %d bytes", m.Type, LaneSize)
	}
	ls := make([]Lane, len(v)/LaneSize)
	for i := range ls {
		e := v[i*LaneSize:]
		ls[i] = Lane{ID: binary.LittleEndian.Uint32(e), From: parseVerbsPeer(e[4:])}
	}
	return ls, nil
}
