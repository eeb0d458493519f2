package api

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"reflect"
	"testing"
)

// TestFrameRoundTrip: every event written as a frame reads back the
// same, output as its raw bytes; a cut stream and a bad frame are errors
// that say so.
func TestFrameRoundTrip(t *testing.T) {
	code := 3
	evs := []ExecEvent{
		{Type: EventStart, Pid: 42},
		{Type: EventStdout, Data: []byte("hello\x00\xff")},
		{Type: EventStderr, Data: []byte("oops\n")},
		{Type: EventKeepalive},
		{Type: EventStdout, Data: []byte{}},
		{Type: EventExit, ExitCode: &code, Signal: "SIGKILL", TimedOut: true},
	}
	var stream []byte
	for i := range evs {
		var err error
		if stream, err = AppendEventFrame(stream, &evs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if k := stream[FrameHeaderLen+len(`{"type":"start","pid":42}`)]; k != FrameStdout {
		t.Fatalf("the stdout frame's kind is %d, want raw stdout", k)
	}
	src := NewStreamReader(FramesContentType+"; charset=binary", bytes.NewReader(stream))
	for i := range evs {
		var got ExecEvent
		if err := src.Next(&got); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		want := evs[i]
		if want.Data != nil && len(want.Data) == 0 {
			want.Data = got.Data // empty either way
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("event %d: %+v, want %+v", i, got, want)
		}
	}
	var ev ExecEvent
	if err := src.Next(&ev); err != io.EOF {
		t.Errorf("after the last frame: %v, want io.EOF", err)
	}
	for _, c := range []struct {
		name   string
		stream []byte
		want   string
	}{
		{"cut header", stream[:3], io.ErrUnexpectedEOF.Error()},
		{"cut payload", stream[:FrameHeaderLen+2], io.ErrUnexpectedEOF.Error()},
		{"unknown kind", []byte{9, 0, 0, 0, 0}, "unknown kind 9"},
		{"huge", binary.BigEndian.AppendUint32([]byte{FrameStdout}, 1<<31), "not an exec stream"},
		{"bad json", append([]byte{FrameEvent, 0, 0, 0, 1}, '{'), "event frame"},
	} {
		err := NewFrameReader(bytes.NewReader(c.stream)).Next(&ev)
		if err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
	// With Reuse the output is the same, read before the next call.
	fr := NewFrameReader(bytes.NewReader(stream))
	fr.Reuse = true
	var out []byte
	for fr.Next(&ev) == nil {
		if ev.Type == EventStdout || ev.Type == EventStderr {
			out = append(out, ev.Data...)
		}
	}
	if string(out) != "hello\x00\xffoops\n" {
		t.Errorf("with Reuse: output %q", out)
	}
	// Any other content type is NDJSON.
	nd := AppendOutputEvent(nil, EventStdout, []byte("x"))
	if err := NewStreamReader("application/x-ndjson", bytes.NewReader(nd)).Next(&ev); err != nil || string(ev.Data) != "x" {
		t.Errorf("ndjson: %+v, %v", ev, err)
	}
}

// FuzzFrameReader: any bytes read as frames give events or an error,
// never a panic, and what was read writes back to the same frames.
func FuzzFrameReader(f *testing.F) {
	seed, _ := AppendEventFrame(nil, &ExecEvent{Type: EventStdout, Data: []byte("hi")})
	f.Add(seed)
	f.Add([]byte{FrameEvent, 0, 0, 0, 2, '{', '}'})
	f.Add([]byte{FrameStderr, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, stream []byte) {
		fr := NewFrameReader(bytes.NewReader(stream))
		for {
			var ev ExecEvent
			err := fr.Next(&ev)
			if err != nil {
				return // io.EOF at the end, or what was wrong
			}
			if _, err := AppendEventFrame(nil, &ev); err != nil {
				t.Fatalf("%+v read from a frame does not write back: %v", ev, err)
			}
		}
	})
}

// BenchmarkFrameReader reads a stream of 64 KiB output frames, beside
// BenchmarkEventReader's NDJSON.
func BenchmarkFrameReader(b *testing.B) {
	data := bytes.Repeat([]byte{0}, 64<<10)
	var stream []byte
	for range 32 {
		stream, _ = AppendEventFrame(stream, &ExecEvent{Type: EventStdout, Data: data})
	}
	for _, reuse := range []bool{false, true} {
		b.Run(fmt.Sprintf("reuse=%v", reuse), func(b *testing.B) {
			b.SetBytes(int64(32 * len(data)))
			for b.Loop() {
				fr := NewFrameReader(bytes.NewReader(stream))
				fr.Reuse = reuse
				var ev ExecEvent
				for fr.Next(&ev) == nil {
				}
			}
		})
	}
}
