package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"
)

// jsonLine is what the guest wrote before AppendOutputEvent: json.Encoder
// without HTML escaping.
func jsonLine(t testing.TB, ev *ExecEvent) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(ev); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func TestAppendOutputEventIsJSON(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 4, 100, 32 << 10, 100_001} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(r.IntN(256))
		}
		for _, typ := range []string{EventStdout, EventStderr} {
			got := AppendOutputEvent(nil, typ, data)
			if want := jsonLine(t, &ExecEvent{Type: typ, Data: data}); !bytes.Equal(got, want) {
				t.Fatalf("%s of %d bytes: AppendOutputEvent wrote %.80q, json.Encoder %.80q", typ, n, got, want)
			}
		}
	}
}

func TestEventReader(t *testing.T) {
	code, big := 3, bytes.Repeat([]byte("x"), 300<<10) // longer than the reader's buffer
	events := []ExecEvent{
		{Type: EventStart, Pid: 42},
		{Type: EventStdout, Data: []byte("hello\n")},
		{Type: EventStderr, Data: []byte{0, 1, 2, 255}},
		{Type: EventKeepalive},
		{Type: EventStdout, Data: big},
		{Type: EventStdout, Data: []byte("at"), Offset: new(int64(7))}, // another shape: encoding/json's path
		{Type: EventExit, ExitCode: &code, DurationMs: 1.5},
	}
	var stream []byte
	for i := range events {
		if events[i].Type == EventStdout && events[i].Offset == nil {
			stream = AppendOutputEvent(stream, events[i].Type, events[i].Data)
		} else {
			stream = append(stream, jsonLine(t, &events[i])...)
		}
		stream = append(stream, "\r\n"[:i%2]...) // blank lines are skipped
	}
	er := NewEventReader(bytes.NewReader(stream))
	for i := range events {
		var ev ExecEvent
		if err := er.Next(&ev); err != nil {
			t.Fatalf("event %d: %v", i, err)
		}
		if !reflect.DeepEqual(ev, events[i]) {
			t.Fatalf("event %d: got %+v, want %+v", i, ev, events[i])
		}
	}
	var ev ExecEvent
	if err := er.Next(&ev); err != io.EOF {
		t.Fatalf("after the last event: %v, want io.EOF", err)
	}

	// The last event without its newline still counts; a cut one does not.
	er = NewEventReader(strings.NewReader(`{"type":"stdout","data":"aGk="}`))
	if err := er.Next(&ev); err != nil || string(ev.Data) != "hi" {
		t.Fatalf("unterminated last line: %+v, %v", ev, err)
	}
	er = NewEventReader(strings.NewReader(`{"type":"exit","exit_co`))
	if err := er.Next(&ev); !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("a cut line: %v, want io.ErrUnexpectedEOF", err)
	}
	er = NewEventReader(strings.NewReader("not json\n"))
	var syn *json.SyntaxError
	if err := er.Next(&ev); !errors.As(err, &syn) {
		t.Fatalf("a line that is not JSON: %v, want a syntax error", err)
	}
}

// FuzzEventReader holds the fast path to encoding/json's meaning: any
// line the reader decodes is decoded the same by json.Unmarshal, and any
// line json.Unmarshal rejects the reader rejects too.
func FuzzEventReader(f *testing.F) {
	f.Add([]byte(`{"type":"stdout","data":"aGk="}`))
	f.Add([]byte(`{"type":"stderr","data":"aGk"}`))
	f.Add([]byte(`{"type":"stdout","data":"a\u0047k="}`))
	f.Add([]byte(`{"type":"stdout","data":"aG\rk="}`))
	f.Add([]byte(`{"type":"stdout","data":"aGk=","offset":3}`))
	f.Add([]byte(`{"type":"exit","exit_code":0}`))
	f.Fuzz(func(t *testing.T, line []byte) {
		if bytes.ContainsAny(line, "\n") {
			return // one line at a time
		}
		var want ExecEvent
		jerr := json.Unmarshal(line, &want)
		var got ExecEvent
		err := NewEventReader(bytes.NewReader(append(line, '\n'))).Next(&got)
		if len(bytes.TrimSpace(line)) == 0 {
			return // a blank line is skipped, not an event
		}
		switch {
		case jerr != nil && err == nil:
			t.Fatalf("%q: the reader took %+v, json.Unmarshal said %v", line, got, jerr)
		case jerr == nil && err != nil:
			t.Fatalf("%q: the reader said %v, json.Unmarshal took %+v", line, err, want)
		case jerr == nil && !reflect.DeepEqual(got, want):
			t.Fatalf("%q: the reader read %+v, json.Unmarshal %+v", line, got, want)
		}
	})
}

// BenchmarkEventReader reads a stream of 32 KiB output events, against
// json.Decoder on the same stream.
func BenchmarkEventReader(b *testing.B) {
	data := bytes.Repeat([]byte{0}, 32<<10)
	var stream []byte
	for range 64 {
		stream = AppendOutputEvent(stream, EventStdout, data)
	}
	b.Run("EventReader", func(b *testing.B) {
		b.SetBytes(int64(64 * len(data)))
		for b.Loop() {
			er := NewEventReader(bytes.NewReader(stream))
			var ev ExecEvent
			for er.Next(&ev) == nil {
			}
		}
	})
	b.Run("json.Decoder", func(b *testing.B) {
		b.SetBytes(int64(64 * len(data)))
		for b.Loop() {
			dec := json.NewDecoder(bytes.NewReader(stream))
			var ev ExecEvent
			for dec.Decode(&ev) == nil {
			}
		}
	})
}
