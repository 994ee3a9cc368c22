package protocol

import (
	"encoding/binary"
	"encoding/json"
	"net/netip"
)

// U8 returns a one-byte attribute.
func U8(t AttrType, v uint8) Attr { return Attr{Type: t, Value: []byte{v}} }

// Bool returns a u8 attribute holding 0 or 1.
func Bool(t AttrType, v bool) Attr {
	if v {
		return U8(t, 1)
	}
	return U8(t, 0)
}

// U32 returns a little-endian u32 attribute.
func U32(t AttrType, v uint32) Attr {
	return Attr{Type: t, Value: binary.LittleEndian.AppendUint32(nil, v)}
}

// U64 returns a little-endian u64 attribute.
func U64(t AttrType, v uint64) Attr {
	return Attr{Type: t, Value: binary.LittleEndian.AppendUint64(nil, v)}
}

// U16BE returns a big-endian u16 attribute (LINK_PORT, a port as on the
// wire).
func U16BE(t AttrType, v uint16) Attr {
	return Attr{Type: t, Value: binary.BigEndian.AppendUint16(nil, v)}
}

// String returns a string attribute.
func String(t AttrType, s string) Attr { return Attr{Type: t, Value: []byte(s)} }

// IP returns the IP attribute: 4 bytes for IPv4 (also IPv4-mapped IPv6),
// 16 for IPv6, network byte order.
func IP(a netip.Addr) Attr {
	a = a.Unmap()
	return Attr{Type: AttrIP, Value: a.AsSlice()}
}

// Endpoint returns an endpoint attribute (LOCAL or REMOTE of the
// brokering messages): the address as IP, then the port, network order.
func Endpoint(t AttrType, ap netip.AddrPort) Attr {
	b := IP(ap.Addr()).Value
	return Attr{Type: t, Value: binary.BigEndian.AppendUint16(b, ap.Port())}
}

// JSON returns the JSON attribute holding v marshalled.
func JSON(v any) (Attr, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return Attr{}, Errorf(CodeInternal, "encode JSON attribute: %w", err)
	}
	return Attr{Type: AttrJSON, Value: b}, nil
}

// ErrorMessage returns the ERROR reply to seq that carries err's code and
// message; an error that is not an *Error becomes INTERNAL. The message is
// cut to the ERR_MSG limit so the reply always encodes.
func ErrorMessage(seq uint32, err error) *Message {
	msg := err.Error()
	if pe, ok := err.(*Error); ok {
		msg = pe.Msg()
	}
	if len(msg) > maxString {
		msg = msg[:maxString]
	}
	return New(TypeError, seq, U32(AttrErrCode, uint32(CodeOf(err))), String(AttrErrMsg, msg))
}

// Get returns the value of the first attribute of type t.
func (m *Message) Get(t AttrType) ([]byte, bool) {
	for _, a := range m.Attrs {
		if a.Type == t {
			return a.Value, true
		}
	}
	return nil, false
}

// String returns a string attribute, or INVALID if it is missing.
func (m *Message) String(t AttrType) (string, error) {
	v, ok := m.Get(t)
	if !ok {
		return "", m.missing(t)
	}
	return string(v), nil
}

// Bool returns a u8 attribute that must be 0 or 1, or INVALID.
func (m *Message) Bool(t AttrType) (bool, error) {
	v, ok := m.Get(t)
	if !ok {
		return false, m.missing(t)
	}
	if len(v) != 1 || v[0] > 1 {
		return false, Errorf(CodeInvalid, "%v of %v must be 0 or 1", t, m.Type)
	}
	return v[0] == 1, nil
}

// fixed returns attribute t, which must be n bytes, or INVALID.
func (m *Message) fixed(t AttrType, n int) ([]byte, error) {
	v, ok := m.Get(t)
	if !ok {
		return nil, m.missing(t)
	}
	if len(v) != n {
		return nil, Errorf(CodeInvalid, "%v of %v must be %d byte(s)", t, m.Type, n)
	}
	return v, nil
}

// U8 returns a u8 attribute, or INVALID if it is missing.
func (m *Message) U8(t AttrType) (uint8, error) {
	v, err := m.fixed(t, 1)
	if err != nil {
		return 0, err
	}
	return v[0], nil
}

// U32 returns a u32 attribute, or INVALID if it is missing.
func (m *Message) U32(t AttrType) (uint32, error) {
	v, err := m.fixed(t, 4)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(v), nil
}

// U64 returns a little-endian u64 attribute, or INVALID if it is missing.
func (m *Message) U64(t AttrType) (uint64, error) {
	v, err := m.fixed(t, 8)
	if err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint64(v), nil
}

// U16BE returns a big-endian u16 attribute, or INVALID if it is missing.
func (m *Message) U16BE(t AttrType) (uint16, error) {
	v, err := m.fixed(t, 2)
	if err != nil {
		return 0, err
	}
	return binary.BigEndian.Uint16(v), nil
}

// IP returns the IP attribute, or INVALID if it is missing.
func (m *Message) IP() (netip.Addr, error) {
	v, ok := m.Get(AttrIP)
	if !ok {
		return netip.Addr{}, m.missing(AttrIP)
	}
	a, ok := netip.AddrFromSlice(v)
	if !ok {
		return netip.Addr{}, Errorf(CodeInvalid, "IP of %v must be 4 or 16 bytes", m.Type)
	}
	return a, nil
}

// Endpoint returns an endpoint attribute, or INVALID if it is missing.
func (m *Message) Endpoint(t AttrType) (netip.AddrPort, error) {
	v, ok := m.Get(t)
	if !ok {
		return netip.AddrPort{}, m.missing(t)
	}
	ep, ok := ParseEndpoint(v)
	if !ok {
		return netip.AddrPort{}, Errorf(CodeInvalid, "%v of %v must be 6 or 18 bytes", t, m.Type)
	}
	return ep, nil
}

// ParseEndpoint reads an endpoint encoded as an endpoint attribute's value
// (also the ledger's, PROTOCOL.md "Links"); ok is false unless b is 6 or
// 18 bytes.
func ParseEndpoint(b []byte) (ep netip.AddrPort, ok bool) {
	if len(b) != 6 && len(b) != 18 {
		return ep, false
	}
	a, _ := netip.AddrFromSlice(b[:len(b)-2])
	return netip.AddrPortFrom(a, binary.BigEndian.Uint16(b[len(b)-2:])), true
}

// JSON unmarshals the JSON attribute into v, or returns INVALID.
func (m *Message) JSON(v any) error {
	b, ok := m.Get(AttrJSON)
	if !ok {
		return m.missing(AttrJSON)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return Errorf(CodeInvalid, "JSON of %v: %w", m.Type, err)
	}
	return nil
}

// Err returns the error an ERROR message carries, or nil for any other type.
func (m *Message) Err() *Error {
	if m.Type != TypeError {
		return nil
	}
	code, err := m.U32(AttrErrCode)
	if err != nil {
		return Errorf(CodeBadMsg, "ERROR reply without ERR_CODE")
	}
	msg, _ := m.String(AttrErrMsg)
	if msg == "" {
		msg = "the agent gave no reason"
	}
	return Errorf(Code(code), "%s", msg)
}

func (m *Message) missing(t AttrType) *Error {
	return Errorf(CodeInvalid, "%v requires the %v attribute", m.Type, t)
}
