package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

// FuzzDecode checks that Decode never panics, rejects only with an *Error,
// and that whatever it accepts re-encodes to the same bytes and decodes to
// the same message. Seeds: the shared vectors plus testdata/fuzz/FuzzDecode.
func FuzzDecode(f *testing.F) {
	for _, m := range []*Message{
		New(TypeHello, 1, String(AttrLibVersion, "0.1.0")),
		New(TypeLookup, 7, Attr{Type: AttrIP, Value: []byte{10, 244, 1, 1}}),
		New(TypeError, 5, U32(AttrErrCode, 5), String(AttrErrMsg, "no")),
		New(TypeOK, 9, Attr{Type: AttrJSON, Value: []byte("[]")}, Attr{Type: 200, Value: []byte{1}}),
	} {
		b, err := Encode(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	for _, b := range vectorMessages(f) {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			var pe *Error
			if !errors.As(err, &pe) || m != nil {
				t.Fatalf("rejection is not a protocol error: %v, %v", m, err)
			}
			return
		}
		re, err := Encode(m)
		if err != nil {
			t.Fatalf("decoded message does not encode: %v", err)
		}
		if !bytes.Equal(re, b) {
			t.Fatalf("re-encoding changed the bytes:\n in %x\nout %x", b, re)
		}
		m2, err := Decode(re)
		if err != nil || !reflect.DeepEqual(normal(m), normal(m2)) {
			t.Fatalf("decode(encode(m)) = %v, %v; want %v", m2, err, m)
		}
	})
}

// normal makes empty values comparable (nil vs empty slice).
func normal(m *Message) *Message {
	c := *m
	c.Attrs = nil
	for _, a := range m.Attrs {
		if len(a.Value) == 0 {
			a.Value = nil
		}
		c.Attrs = append(c.Attrs, a)
	}
	return &c
}

// vectorMessages returns the messages of the shared test vectors.
func vectorMessages(f *testing.F) [][]byte {
	data, err := os.ReadFile("../../docs/protocol-vectors.txt")
	if err != nil {
		f.Fatalf("read shared test vectors: %v", err)
	}
	var out [][]byte
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if b, err := hex.DecodeString(fields[2]); err == nil {
			out = append(out, b)
		}
	}
	return out
}
