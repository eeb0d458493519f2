package storage

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

// FuzzSnapshotStream reads arbitrary bytes as a snapshot stream (what POST
// /v1/snapshots/import takes from the network) layer by layer, as the
// import does: no panic, no config or frame past its limit is accepted,
// and every failure is an invalid-argument error.
func FuzzSnapshotStream(f *testing.F) {
	frame := func(typ byte, payload []byte) []byte {
		b := []byte{typ, 0, 0, 0, 0}
		binary.BigEndian.PutUint32(b[1:], uint32(len(payload)))
		return append(b, payload...)
	}
	var ok bytes.Buffer
	ok.WriteString(streamMagic)
	ok.Write(frame(frameConfig, []byte(`{"layers":1}`)))
	sw := &streamWriter{w: &ok, h: newSHA()}
	_, _ = sw.Write([]byte("layer data"))
	sum := sw.h.Sum(nil)
	ok.Write(frame(frameEnd, sum))
	ok.Write(frame(frameLast, nil))
	f.Add(ok.Bytes())
	f.Add(append([]byte(streamMagic), frame(frameConfig, nil)...))
	f.Add(append([]byte(streamMagic), 'C', 0xff, 0xff, 0xff, 0xff))
	f.Add(append(append([]byte(streamMagic), frame(frameConfig, nil)...), 'D', 0xff, 0xff, 0xff, 0xff))
	f.Add(append(append([]byte(streamMagic), frame(frameConfig, nil)...), frame(frameEnd, []byte("short"))...))
	f.Add([]byte("not a stream"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := NewSnapshotStreamReader(bytes.NewReader(data))
		check := func(err error) {
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("error %v is not invalid-argument", err)
			}
		}
		check(err)
		if err != nil {
			return
		}
		if len(s.Config) > MaxStreamConfig {
			t.Fatalf("a config of %d bytes", len(s.Config))
		}
		for range 100 {
			more, err := s.NextLayer()
			check(err)
			if err != nil || !more {
				return
			}
			n, err := io.Copy(io.Discard, s)
			check(err)
			if n > int64(len(data)) {
				t.Fatalf("read %d bytes of layer data from %d bytes", n, len(data))
			}
			if err != nil {
				return
			}
		}
	})
}
