package protocol

import "encoding/binary"

// Decode parses one datagram. It checks, in the order PROTOCOL.md gives and
// reporting the first failure: size >= 12, magic, version, length against
// the datagram size, message type, then each attribute in wire order (fits
// in the payload, known attributes have a valid size and appear once).
// Unknown attributes are kept. The message does not alias b.
func Decode(b []byte) (*Message, error) {
	if len(b) < HeaderSize {
		return nil, Errorf(CodeBadMsg, "message of %d bytes is shorter than the %d-byte header", len(b), HeaderSize)
	}
	if m := binary.LittleEndian.Uint16(b[0:]); m != Magic {
		return nil, Errorf(CodeBadMsg, "bad magic 0x%04x, want 0x%04x: the peer does not speak the FreeFlow protocol", m, Magic)
	}
	if v := b[2]; v != Version {
		return nil, Errorf(CodeVersion, "protocol version %d is not supported; this side speaks version %d", v, Version)
	}
	// Compare in uint64 so a huge length cannot wrap.
	if n := uint64(binary.LittleEndian.Uint32(b[8:])); n != uint64(len(b)-HeaderSize) || n > MaxPayload {
		return nil, Errorf(CodeBadMsg, "header length %d disagrees with the %d-byte payload", n, len(b)-HeaderSize)
	}
	m := &Message{Type: Type(b[3]), Seq: binary.LittleEndian.Uint32(b[4:])}
	if !m.Type.Known() {
		return nil, Errorf(CodeUnknown, "unknown message type 0x%02x", b[3])
	}
	attrs, err := decodeAttrs(append([]byte(nil), b[HeaderSize:]...))
	if err != nil {
		return nil, err
	}
	m.Attrs = attrs
	return m, nil
}

// decodeAttrs splits payload into attributes that alias it.
func decodeAttrs(p []byte) ([]Attr, error) {
	var attrs []Attr
	seen := map[AttrType]bool{}
	for off := 0; off < len(p); {
		if len(p)-off < attrHeader {
			return nil, Errorf(CodeBadMsg, "attribute header at offset %d runs past the end of the payload", off)
		}
		t := AttrType(binary.LittleEndian.Uint16(p[off:]))
		n := int(binary.LittleEndian.Uint16(p[off+2:]))
		off += attrHeader
		if n > len(p)-off {
			return nil, Errorf(CodeBadMsg, "%v value of %d bytes runs past the end of the payload", t, n)
		}
		if err := checkAttr(t, n, seen); err != nil {
			return nil, err
		}
		attrs = append(attrs, Attr{Type: t, Value: p[off : off+n : off+n]})
		off += n
	}
	return attrs, nil
}

// checkAttr applies the size and duplicate rules to a known attribute.
func checkAttr(t AttrType, n int, seen map[AttrType]bool) error {
	spec, known := attrSpecs[t]
	if !known {
		return nil
	}
	if seen[t] {
		return Errorf(CodeBadMsg, "%v appears twice", t)
	}
	seen[t] = true
	ok := true
	switch spec.kind {
	case kindU8:
		ok = n == 1
	case kindU32:
		ok = n == 4
	case kindIP:
		ok = n == 4 || n == 16
	case kindEndpoint:
		ok = n == 6 || n == 18
	case kindBytes:
		ok = n <= spec.max
	case kindFixed:
		ok = n == spec.max
	case kindSegs:
		ok = n >= segmentSize && n <= spec.max && n%segmentSize == 0
	case kindLanes:
		ok = n >= LaneSize && n <= spec.max && n%LaneSize == 0
	}
	if !ok {
		return Errorf(CodeBadMsg, "%v has a value of %d bytes, which its type does not allow", t, n)
	}
	return nil
}

// Encode returns the wire form of m. It refuses what Decode would refuse,
// so a peer never receives a malformed message from this side.
func Encode(m *Message) ([]byte, error) {
	if !m.Type.Known() {
		return nil, Errorf(CodeInternal, "encode: unknown message type 0x%02x", uint8(m.Type))
	}
	size := HeaderSize
	seen := map[AttrType]bool{}
	for _, a := range m.Attrs {
		if len(a.Value) > 0xffff {
			return nil, Errorf(CodeInternal, "encode: %v value of %d bytes exceeds 65535", a.Type, len(a.Value))
		}
		if err := checkAttr(a.Type, len(a.Value), seen); err != nil {
			return nil, Errorf(CodeInternal, "encode: %w", err)
		}
		size += attrHeader + len(a.Value)
	}
	if size > MaxMessage {
		return nil, Errorf(CodeInternal, "encode: message of %d bytes exceeds the %d-byte limit", size, MaxMessage)
	}
	b := make([]byte, HeaderSize, size)
	binary.LittleEndian.PutUint16(b[0:], Magic)
	b[2] = Version
	b[3] = byte(m.Type)
	binary.LittleEndian.PutUint32(b[4:], m.Seq)
	binary.LittleEndian.PutUint32(b[8:], uint32(size-HeaderSize))
	for _, a := range m.Attrs {
		b = binary.LittleEndian.AppendUint16(b, uint16(a.Type))
		b = binary.LittleEndian.AppendUint16(b, uint16(len(a.Value)))
		b = append(b, a.Value...)
	}
	return b, nil
}
