package protocol

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
)

func mustEncode(t *testing.T, m *Message) []byte {
	t.Helper()
	b, err := Encode(m)
	if err != nil {
		t.Fatalf("encode %v: %v", m.Type, err)
	}
	return b
}

func wantCode(t *testing.T, err error, code Code) {
	t.Helper()
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != code {
		t.Fatalf("got error %v, want code %v", err, code)
	}
}

// The limits too large for the vector file: a message of exactly
// MaxMessage bytes, JSON at 65000 and 65001 bytes, one byte over MaxMessage.
func TestLimits(t *testing.T) {
	json := Attr{Type: AttrJSON, Value: bytes.Repeat([]byte("x"), 65000)}
	b := mustEncode(t, New(TypeOK, 1, json))
	if _, err := Decode(b); err != nil {
		t.Fatalf("JSON of 65000 bytes: %v", err)
	}
	json.Value = append(json.Value, 'x')
	_, err := Encode(New(TypeOK, 1, json))
	wantCode(t, err, CodeInternal)
	b = mustEncode(t, New(TypeOK, 1, Attr{Type: AttrJSON, Value: []byte("x")}))
	b[HeaderSize+2] = 0xe9 // 65001 = 0xfde9
	b[HeaderSize+3] = 0xfd
	b = append(b, bytes.Repeat([]byte("x"), 65000)...)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-HeaderSize))
	_, err = Decode(b)
	wantCode(t, err, CodeBadMsg)

	// Fill a message to exactly MaxMessage with an unknown attribute.
	fill := Attr{Type: 999, Value: make([]byte, MaxMessage-HeaderSize-attrHeader)}
	b = mustEncode(t, New(TypeList, 2, fill))
	if len(b) != MaxMessage {
		t.Fatalf("built %d bytes, want %d", len(b), MaxMessage)
	}
	if _, err := Decode(b); err != nil {
		t.Fatalf("message of MaxMessage bytes: %v", err)
	}
	b = append(b, 0)
	binary.LittleEndian.PutUint32(b[8:], uint32(len(b)-HeaderSize))
	_, err = Decode(b)
	wantCode(t, err, CodeBadMsg)
}

func TestEncodeRefusesWhatDecodeRefuses(t *testing.T) {
	cases := map[string]*Message{
		"unknown type":  New(0x2b, 1),
		"duplicate":     New(TypeLookup, 1, IP(netip.MustParseAddr("10.0.0.1")), IP(netip.MustParseAddr("10.0.0.2"))),
		"u8 size":       New(TypeLookupReply, 1, Attr{Type: AttrFound, Value: []byte{1, 0}}),
		"long name":     New(TypeLookupReply, 1, String(AttrName, strings.Repeat("n", 256))),
		"ip size":       New(TypeLookup, 1, Attr{Type: AttrIP, Value: []byte{1, 2, 3}}),
		"value > 65535": New(TypeList, 1, Attr{Type: 999, Value: make([]byte, 70000)}),
		"segments 15":   New(TypeVerbsMRReg, 1, Attr{Type: AttrSegments, Value: make([]byte, 15)}),
		// LISTING is a u8; the library's decoder does not know it, so this
		// case has no vector (the C decoder would keep it as unknown).
		"listing size": New(TypeConns, 1, Attr{Type: AttrListing, Value: []byte{1, 0}}),
	}
	for name, m := range cases {
		if b, err := Encode(m); err == nil {
			t.Errorf("%s: encoded %d bytes, want an error", name, len(b))
		}
	}
}

func TestAttrHelpersRoundTrip(t *testing.T) {
	v4 := netip.MustParseAddr("10.244.1.2")
	j, err := JSON(map[string]string{"id": "c1"})
	if err != nil {
		t.Fatal(err)
	}
	in := New(TypeLookupReply, 9, Bool(AttrFound, true), String(AttrName, "web"),
		IP(netip.AddrFrom16(v4.As16())), U32(AttrErrCode, 7), j)
	m, err := Decode(mustEncode(t, in))
	if err != nil {
		t.Fatal(err)
	}
	if found, err := m.Bool(AttrFound); err != nil || !found {
		t.Errorf("FOUND = %v, %v", found, err)
	}
	if name, err := m.String(AttrName); err != nil || name != "web" {
		t.Errorf("NAME = %q, %v", name, err)
	}
	if ip, err := m.IP(); err != nil || ip != v4 {
		t.Errorf("IP = %v, %v; want the IPv4-mapped address sent as 4 bytes", ip, err)
	}
	if v, err := m.U8(AttrFound); err != nil || v != 1 {
		t.Errorf("FOUND as u8 = %d, %v", v, err)
	}
	if c, err := m.U32(AttrErrCode); err != nil || c != 7 {
		t.Errorf("ERR_CODE = %d, %v", c, err)
	}
	var got map[string]string
	if err := m.JSON(&got); err != nil || got["id"] != "c1" {
		t.Errorf("JSON = %v, %v", got, err)
	}
	_, err = m.String(AttrTenant)
	wantCode(t, err, CodeInvalid)
	_, err = m.U8(AttrPathKind)
	wantCode(t, err, CodeInvalid)
	bad := New(TypeLookupReply, 1, U8(AttrFound, 2))
	_, err = bad.Bool(AttrFound)
	wantCode(t, err, CodeInvalid)
}

func TestErrorMessage(t *testing.T) {
	in := Errorf(CodeDenied, "caller is not a registered container of host %s", "h1")
	m, err := Decode(mustEncode(t, ErrorMessage(5, in)))
	if err != nil {
		t.Fatal(err)
	}
	out := m.Err()
	if out == nil || out.Code != CodeDenied || out.Msg() != in.Msg() {
		t.Fatalf("round trip of %v gave %v", in, out)
	}
	long := ErrorMessage(1, errors.New(strings.Repeat("e", 5000)))
	if _, err := Encode(long); err != nil {
		t.Fatalf("a long error message must still encode: %v", err)
	}
	if c, _ := long.U32(AttrErrCode); Code(c) != CodeInternal {
		t.Errorf("plain error became %v, want INTERNAL", Code(c))
	}
	if !CodeBadMsg.Closes() || CodeDenied.Closes() {
		t.Error("Closes must follow Session rule 3")
	}
}

func TestEndpointAttr(t *testing.T) {
	for _, s := range []string{"10.244.1.2:5201", "[fd00::a]:80", "0.0.0.0:0"} {
		ap := netip.MustParseAddrPort(s)
		in := New(TypeConnect, 1, Endpoint(AttrLocalEndpoint, ap), Endpoint(AttrRemoteEndpoint, ap))
		m, err := Decode(mustEncode(t, in))
		if err != nil {
			t.Fatal(err)
		}
		if got, err := m.Endpoint(AttrRemoteEndpoint); err != nil || got != ap {
			t.Errorf("endpoint %s came back as %v, %v", s, got, err)
		}
	}
	b := mustEncode(t, New(TypeListen, 1, Endpoint(AttrLocalEndpoint, netip.MustParseAddrPort("10.0.0.1:80"))))
	if want := "0e0006000a0000010050"; fmt.Sprintf("%x", b[HeaderSize:]) != want {
		t.Errorf("LOCAL endpoint on the wire = %x, want %s (address then port, network order)", b[HeaderSize:], want)
	}
}

// VERBS_LANES as Lanes writes it is the vector verbs_lanes_one of
// docs/protocol-vectors.txt, which the C decoder checks too, and reads
// back entry by entry; a message without it has no lanes.
func TestVerbsLanesAttr(t *testing.T) {
	from := VerbsPeer{QPN: 0x101, LID: 0x0a04, GID: netip.MustParseAddr("::ffff:10.244.10.4").As16()}
	got := mustEncode(t, New(TypeOK, 91, Lanes([]Lane{{ID: 1, From: from}})))
	if want := vectorBytes(t, "verbs_lanes_one"); !bytes.Equal(got, want) {
		t.Fatalf("Lanes encodes to\n%x\nwant the vector's\n%x", got, want)
	}
	in := make([]Lane, MaxFDs)
	for i := range in {
		in[i] = Lane{ID: uint32(i*7 + 1), From: VerbsPeer{QPN: uint32(i) << 8, LID: uint16(i), GID: [16]byte{15: byte(i)}}}
	}
	m, err := Decode(mustEncode(t, New(TypeOK, 1, Lanes(in))))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := m.Lanes(); err != nil || !slices.Equal(out, in) {
		t.Fatalf("16 lanes read back as %+v, %v", out, err)
	}
	if out, err := New(TypeOK, 1).Lanes(); err != nil || out != nil {
		t.Fatalf("no VERBS_LANES: %+v, %v; want none", out, err)
	}
	_, err = New(TypeOK, 1, Attr{Type: AttrVerbsLanes, Value: make([]byte, LaneSize+1)}).Lanes()
	wantCode(t, err, CodeInvalid)
}

// vectorBytes returns the bytes of the vector called name.
func vectorBytes(t *testing.T, name string) []byte {
	t.Helper()
	data, err := os.ReadFile("../../docs/protocol-vectors.txt")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[0] == name {
			b, err := hex.DecodeString(f[2])
			if err != nil {
				t.Fatalf("vector %s: %v", name, err)
			}
			return b
		}
	}
	t.Fatalf("no vector %s in docs/protocol-vectors.txt", name)
	return nil
}
