// Package protocol is the Go codec of the FreeFlow agent protocol, version 1,
// exactly as docs/PROTOCOL.md defines it (the C library implements the same
// document; both check docs/protocol-vectors.txt).
//
// A message is a 12-byte header and a payload of type-length-value
// attributes. Decode applies every receiver rule of the spec in the spec's
// order and reports the first failure as an *Error whose Code is the wire
// error code, so the agent can send that code back unchanged.
package protocol

import "fmt"

// Wire constants.
const (
	Magic      = 0x4646 // the bytes 46 46, "FF"
	Version    = 1
	HeaderSize = 12
	MaxMessage = 65536 // a whole message, header included
	MaxPayload = MaxMessage - HeaderSize
	attrHeader = 4
)

// Type is a message type.
type Type uint8

// Message types of version 1.
const (
	TypeHello       Type = 0x01
	TypeHelloReply  Type = 0x02
	TypeLookup      Type = 0x03
	TypeLookupReply Type = 0x04
	TypeListen      Type = 0x10
	TypeUnlisten    Type = 0x11
	TypeConnect     Type = 0x12
	TypeAccept      Type = 0x13
	TypePath        Type = 0x14
	TypeClosed      Type = 0x15
	TypeLinkOffer   Type = 0x17 // library to library, over a link only
	TypeLedger      Type = 0x18 // library to agent: the process's ledger memfd (0x16 is retired)
	TypeLinkFill    Type = 0x19 // library to agent: stock connections for a cross-host link (0x1a is reserved)
	TypeLinkTake    Type = 0x1b // library to library, on a stock connection
	TypeLinkCommit  Type = 0x1c // library to library, on a stock connection
	TypeWatch       Type = 0x1d // library to agent: wait for a connection to park (answered by PARK)
	TypePark        Type = 0x1e // agent to library, the answer to WATCH: park this connection on the TCP socket carried
	TypeResume      Type = 0x1f // agent to library, the answer to WATCH: move this socket-pair connection back onto the shm channel carried
	// The verbs provider's requests and their answers (PROTOCOL.md, "Verbs").
	TypeVerbsQPCreate  Type = 0x20
	TypeVerbsConnect   Type = 0x21
	TypeVerbsPeerQP    Type = 0x22 // the answer to VERBS_CONNECT
	TypeVerbsMRReg     Type = 0x23
	TypeVerbsMRGet     Type = 0x24
	TypeVerbsMRGrant   Type = 0x25 // the answer to VERBS_MR_GET
	TypeVerbsMRDereg   Type = 0x26
	TypeVerbsQPDestroy Type = 0x27
	TypeVerbsUDLane    Type = 0x28 // a UD QP's lane to another UD QP
	TypeVerbsUDLanes   Type = 0x29 // a UD QP asks for the lanes to it
	TypeVerbsQPReset   Type = 0x2a // an RC QP back to RESET: its new memfd
	TypeOffer          Type = 0x30 // agent to agent, on the broker port (see PROTOCOL.md)
	TypeCommit         Type = 0x31 // agent to agent: the connector's agent takes a fast PATH
	TypeVerbsOffer     Type = 0x32 // agent to agent, on the broker port: a TCP connection for a pair of verbs QPs
	TypeVerbsUDOffer   Type = 0x33 // agent to agent, on the broker port: a TCP connection for a UD lane across hosts
	TypeRegister       Type = 0x40
	TypeUnregister     Type = 0x41
	TypeList           Type = 0x42
	TypeStatus         Type = 0x43
	TypeOK             Type = 0x44
	TypeConns          Type = 0x45
	TypeRelease        Type = 0x46 // admin to agent: close a migrating container's sessions, refuse new ones until TIME
	TypeParkContainer  Type = 0x47 // admin to agent: park a migrating container's shm connections on TCP
	TypeError          Type = 0x7f
)

var typeNames = map[Type]string{
	TypeHello: "HELLO", TypeHelloReply: "HELLO_REPLY", TypeLookup: "LOOKUP",
	TypeLookupReply: "LOOKUP_REPLY", TypeListen: "LISTEN", TypeUnlisten: "UNLISTEN",
	TypeConnect: "CONNECT", TypeAccept: "ACCEPT", TypePath: "PATH", TypeClosed: "CLOSED",
	TypeLinkOffer: "LINK_OFFER", TypeLedger: "LEDGER", TypeLinkFill: "LINK_FILL",
	TypeLinkTake: "LINK_TAKE", TypeLinkCommit: "LINK_COMMIT", TypeWatch: "WATCH", TypePark: "PARK", TypeResume: "RESUME",
	TypeVerbsQPCreate: "VERBS_QP_CREATE", TypeVerbsConnect: "VERBS_CONNECT", TypeVerbsPeerQP: "VERBS_PEER_QP",
	TypeVerbsMRReg: "VERBS_MR_REG", TypeVerbsMRGet: "VERBS_MR_GET", TypeVerbsMRGrant: "VERBS_MR_GRANT",
	TypeVerbsMRDereg: "VERBS_MR_DEREG", TypeVerbsQPDestroy: "VERBS_QP_DESTROY",
	TypeVerbsUDLane: "VERBS_UD_LANE", TypeVerbsUDLanes: "VERBS_UD_LANES", TypeVerbsQPReset: "VERBS_QP_RESET",
	TypeOffer: "OFFER", TypeCommit: "COMMIT", TypeVerbsOffer: "VERBS_OFFER", TypeVerbsUDOffer: "VERBS_UD_OFFER",
	TypeConns: "CONNS", TypeRegister: "REGISTER", TypeUnregister: "UNREGISTER",
	TypeList: "LIST", TypeStatus: "STATUS", TypeOK: "OK", TypeRelease: "RELEASE", TypeParkContainer: "PARK_CONTAINER", TypeError: "ERROR",
}

// Known reports whether t is a message type of version 1. 0x1a and the
// ranges 0x2b-0x2f and 0x34-0x3f are reserved; 0x16 (OPENED) is retired.
func (t Type) Known() bool { _, ok := typeNames[t]; return ok }

func (t Type) String() string {
	if n, ok := typeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("type 0x%02x", uint8(t))
}

// AttrType is an attribute type.
type AttrType uint16

// Attribute types of version 1.
const (
	AttrErrCode      AttrType = 1
	AttrErrMsg       AttrType = 2
	AttrIP           AttrType = 3
	AttrName         AttrType = 4
	AttrHost         AttrType = 5
	AttrTenant       AttrType = 6
	AttrContainerID  AttrType = 7
	AttrFound        AttrType = 8
	AttrLocal        AttrType = 9
	AttrFreeFlow     AttrType = 10
	AttrLibVersion   AttrType = 11
	AttrAgentVersion AttrType = 12
	AttrJSON         AttrType = 13
	// The spec names attribute 14 LOCAL, like the u8 attribute 9; in Go it is
	// AttrLocalEndpoint.
	AttrLocalEndpoint  AttrType = 14
	AttrRemoteEndpoint AttrType = 15
	AttrPathKind       AttrType = 16
	AttrReason         AttrType = 17
	AttrNonce          AttrType = 18 // OFFER, VERBS_OFFER: 16 random bytes; echoed in its reply
	AttrTime           AttrType = 19 // OFFER, VERBS_OFFER: u64 little-endian, Unix milliseconds
	AttrMAC            AttrType = 20 // OFFER, VERBS_OFFER and their replies: HMAC-SHA256, 32 bytes
	AttrCaps           AttrType = 21 // HELLO: u32 bitmask of what the library can do (Cap*)
	AttrLinkTTL        AttrType = 22 // PATH with a link: u32 little-endian, milliseconds
	AttrChannel        AttrType = 23 // LINK_OFFER: u32, the connector's number for the channel
	AttrLink           AttrType = 24 // cross-host link: u64 little-endian, the connector agent's name for it
	AttrCount          AttrType = 25 // LINK_FILL: u32, how many stock connections, 1 to 16
	AttrToken          AttrType = 26 // cross-host link: its 16-byte secret
	AttrLinkPort       AttrType = 27 // cross-host link: u16 big-endian, its listener's port
	AttrOffset         AttrType = 28 // CONNS: u32, how many entries of the list to skip
	AttrQPN            AttrType = 29 // verbs: u32, a queue pair's number, 1 to 0xffffff
	AttrVerbsPeer      AttrType = 30 // VERBS_CONNECT: 24 bytes, the remote QP as ibv_modify_qp names it
	AttrVerbsQP        AttrType = 31 // 8 bytes: u32 QP type, u32 PD
	AttrVerbsMR        AttrType = 32 // 24 bytes: u64 address, u64 length, u32 access, u32 PD
	AttrRKey           AttrType = 33 // u32: a memory region's remote key
	AttrSegments       AttrType = 34 // 16 to 256 bytes, a multiple of 16: (u64 offset, u64 length) per fd
	AttrListing        AttrType = 35 // CONNS and its reply: u8, which list (List*); absent = connections
	AttrVerbsLanes     AttrType = 36 // 28 to 448 bytes, a multiple of 28: (u32 lane id, VERBS_PEER) per fd
	AttrRole           AttrType = 37 // RESUME: u8, which ring of the shm channel this end produces into (Role*)
)

// Values of ROLE (docs/SHM.md, "Layout": the connector produces into ring 0).
const (
	RoleConnector = 1
	RoleAcceptor  = 2
)

// Values of LISTING: the lists CONNS pages through.
const (
	ListConns    = 0 // the live connections
	ListQPs      = 1 // the verbs queue pairs
	ListVerbsMem = 2 // per container, the verbs QPs, regions and memfds held
)

// Bits of CAPS.
const (
	CapShm  uint32 = 1 << 0 // the library can take a shared-memory channel (PATH_KIND 3)
	CapLink uint32 = 1 << 1 // the library can take a link (a third fd on PATH shm)
	// CapXLink: the library can take a cross-host link; in an OFFER, the
	// connecting library can.
	CapXLink uint32 = 1 << 2
	// CapSynMark: the library marks the SYN of every connection it asks
	// about, and asks about an accepted one only if its SYN has the mark
	// (PROTOCOL.md, "The SYN mark"); in an OFFER, the connecting library
	// does.
	CapSynMark uint32 = 1 << 3
	// CapResume: the library's parking thread takes RESUME (PROTOCOL.md,
	// "Back to shared memory").
	CapResume uint32 = 1 << 4
	// CapResumeParked: and RESUME of a connection parked on TCP, with a
	// second fd, its new bell (PROTOCOL.md, "Back to shared memory").
	CapResumeParked uint32 = 1 << 5
)

// valueKind says how the decoder checks an attribute's value length.
type valueKind uint8

const (
	kindU8       valueKind = iota // exactly 1 byte
	kindU32                       // exactly 4 bytes
	kindIP                        // 4 or 16 bytes
	kindEndpoint                  // 6 or 18 bytes: address and port
	kindBytes                     // 0..max bytes (strings, JSON)
	kindFixed                     // exactly max bytes (also u16 and u64 values)
	kindSegs                      // segmentSize to max bytes, a multiple of segmentSize (SEGMENTS)
	kindLanes                     // laneSize to max bytes, a multiple of laneSize (VERBS_LANES)
)

// segmentSize is the size of one SEGMENTS entry: u64 offset, u64 length.
const segmentSize = 16

// LaneSize is the size of one VERBS_LANES entry: u32 lane id, then a VERBS_PEER.
const LaneSize = 28

type attrSpec struct {
	name string
	kind valueKind
	max  int // kindBytes only
}

// maxString is the limit of a string attribute that states none.
const maxString = 1024

var attrSpecs = map[AttrType]attrSpec{
	AttrErrCode:        {"ERR_CODE", kindU32, 0},
	AttrErrMsg:         {"ERR_MSG", kindBytes, maxString},
	AttrIP:             {"IP", kindIP, 0},
	AttrName:           {"NAME", kindBytes, 255},
	AttrHost:           {"HOST", kindBytes, 255},
	AttrTenant:         {"TENANT", kindBytes, 255},
	AttrContainerID:    {"CONTAINER_ID", kindBytes, 255},
	AttrFound:          {"FOUND", kindU8, 0},
	AttrLocal:          {"LOCAL", kindU8, 0},
	AttrFreeFlow:       {"FREEFLOW", kindU8, 0},
	AttrLibVersion:     {"LIB_VERSION", kindBytes, 64},
	AttrAgentVersion:   {"AGENT_VERSION", kindBytes, 64},
	AttrJSON:           {"JSON", kindBytes, 65000},
	AttrLocalEndpoint:  {"LOCAL endpoint", kindEndpoint, 0},
	AttrRemoteEndpoint: {"REMOTE", kindEndpoint, 0},
	AttrPathKind:       {"PATH_KIND", kindU8, 0},
	AttrReason:         {"REASON", kindBytes, 64},
	AttrNonce:          {"NONCE", kindFixed, 16},
	AttrTime:           {"TIME", kindFixed, 8},
	AttrMAC:            {"MAC", kindFixed, 32},
	AttrCaps:           {"CAPS", kindU32, 0},
	AttrLinkTTL:        {"LINK_TTL", kindU32, 0},
	AttrChannel:        {"CHANNEL", kindU32, 0},
	AttrLink:           {"LINK", kindFixed, 8},
	AttrCount:          {"COUNT", kindU32, 0},
	AttrToken:          {"TOKEN", kindFixed, 16},
	AttrLinkPort:       {"LINK_PORT", kindFixed, 2},
	AttrOffset:         {"OFFSET", kindU32, 0},
	AttrQPN:            {"QPN", kindU32, 0},
	AttrVerbsPeer:      {"VERBS_PEER", kindFixed, 24},
	AttrVerbsQP:        {"VERBS_QP", kindFixed, 8},
	AttrVerbsMR:        {"VERBS_MR", kindFixed, 24},
	AttrRKey:           {"RKEY", kindU32, 0},
	AttrSegments:       {"SEGMENTS", kindSegs, MaxFDs * segmentSize},
	AttrListing:        {"LISTING", kindU8, 0},
	AttrVerbsLanes:     {"VERBS_LANES", kindLanes, MaxFDs * LaneSize},
	AttrRole:           {"ROLE", kindU8, 0},
}

func (a AttrType) String() string {
	if s, ok := attrSpecs[a]; ok {
		return s.name
	}
	return fmt.Sprintf("attribute %d", uint16(a))
}

// Attr is one attribute. Unknown types are kept so that a message re-encodes
// to the same bytes.
type Attr struct {
	Type  AttrType
	Value []byte
}

// Message is one decoded message; Attrs are in wire order.
type Message struct {
	Type  Type
	Seq   uint32
	Attrs []Attr
}

// New returns a message of type t with the given attributes.
func New(t Type, seq uint32, attrs ...Attr) *Message {
	return &Message{Type: t, Seq: seq, Attrs: attrs}
}
