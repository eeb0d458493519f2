package code

import (
	"errors"
	"testing"
)

func TestSignatures(t *testing.T) {
	s := signer{key: []byte("k1")}
	frames, id, err := s.encode("sess", "execute_request", map[string]string{"code": "1"})
	if err != nil {
		t.Fatal(err)
	}
	// A router puts identities before the delimiter.
	withID := append([][]byte{[]byte("peer")}, frames...)
	m, err := s.decode(withID)
	if err != nil || m.Header.MsgID != id || m.Header.MsgType != "execute_request" || string(m.Content) != `{"code":"1"}` {
		t.Fatalf("decode: %+v %v", m, err)
	}
	for name, f := range map[string]func([][]byte) [][]byte{
		"content changed": func(f [][]byte) [][]byte { f[5] = []byte(`{"code":"2"}`); return f },
		"signature empty": func(f [][]byte) [][]byte { f[1] = nil; return f },
		"too few frames":  func(f [][]byte) [][]byte { return f[:4] },
		"other key":       func(f [][]byte) [][]byte { o, _, _ := signer{key: []byte("k2")}.encode("s", "x", 1); return o },
	} {
		fr := make([][]byte, len(frames))
		copy(fr, frames)
		if _, err := s.decode(f(fr)); err == nil {
			t.Errorf("%s: decoded", name)
		} else if name != "too few frames" && !errors.Is(err, errBadSignature) {
			t.Errorf("%s: %v, want a signature error", name, err)
		}
	}
}
