package api

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// An output event on an NDJSON exec stream, as encoding/json writes an
// ExecEvent with only Type and Data set:
//
//	{"type":"stdout","data":"<base64>"}
//
// AppendOutputEvent writes exactly these bytes and EventReader reads them
// without encoding/json, whose byte-at-a-time scanner held a stream of
// output to about 45 MB/s; every other event, and any line of another
// shape, goes through encoding/json as before. The wire format is
// unchanged: a client that decodes every line with a JSON library reads
// the same events.
const (
	outputEventMid = `","data":"`
	outputEventEnd = `"}`
)

// AppendOutputEvent appends the NDJSON line of an output event of type
// typ (EventStdout or EventStderr) carrying data, newline included: the
// same bytes json.Encoder writes for ExecEvent{Type: typ, Data: data}.
func AppendOutputEvent(dst []byte, typ string, data []byte) []byte {
	dst = append(dst, `{"type":"`...)
	dst = append(dst, typ...)
	dst = append(dst, outputEventMid...)
	dst = base64.StdEncoding.AppendEncode(dst, data)
	return append(dst, outputEventEnd+"\n"...)
}

// maxEventLine bounds one line of an event stream: output events carry at
// most a read's worth of bytes (well under a megabyte of base64), so a
// longer line is a broken or hostile stream, not a big event.
const maxEventLine = 64 << 20

// EventReader reads the ExecEvents of an NDJSON exec or process stream,
// one per line. Output events (stdout, stderr) are decoded directly,
// everything else with encoding/json.
type EventReader struct {
	r    *bufio.Reader
	long []byte // a line longer than r's buffer, gathered
}

// NewEventReader reads events from r.
func NewEventReader(r io.Reader) *EventReader {
	return &EventReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Next reads the next event into ev, replacing what ev held. ev.Data is
// the reader's own copy: the caller may keep it. At the stream's clean end
// it returns io.EOF; a stream cut in the middle of a line gives
// io.ErrUnexpectedEOF, and a line that is not an event a JSON syntax or
// type error, as json.Decoder would.
func (er *EventReader) Next(ev *ExecEvent) error {
	for {
		line, err := er.readLine()
		if len(bytes.TrimSpace(line)) == 0 {
			if err != nil {
				return err
			}
			continue // blank lines between events, as json.Decoder skips them
		}
		*ev = ExecEvent{}
		if typ, b64, ok := splitOutputEvent(line); ok {
			data := make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
			n, derr := base64.StdEncoding.Decode(data, b64)
			if derr == nil {
				ev.Type, ev.Data = typ, data[:n]
				return nil
			}
			// Not valid base64: let encoding/json say so in its words.
		}
		if jerr := json.Unmarshal(line, ev); jerr != nil {
			var syn *json.SyntaxError
			if errors.Is(err, io.EOF) && errors.As(jerr, &syn) {
				return io.ErrUnexpectedEOF // the stream ended mid-event
			}
			return jerr
		}
		return nil
	}
}

// readLine returns the next line without its newline. At the stream's
// end it returns what is left (possibly nothing) with the reader's error.
func (er *EventReader) readLine() ([]byte, error) {
	er.long = er.long[:0]
	for {
		frag, err := er.r.ReadSlice('\n')
		if err == nil {
			if len(er.long) == 0 {
				return frag[:len(frag)-1], nil
			}
			er.long = append(er.long, frag[:len(frag)-1]...)
			return er.long, nil
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			if len(er.long)+len(frag) > maxEventLine {
				return nil, fmt.Errorf("an event stream line is over %d MiB: not an exec stream", maxEventLine>>20)
			}
			er.long = append(er.long, frag...)
			continue
		}
		if len(er.long) == 0 {
			return frag, err
		}
		return append(er.long, frag...), err
	}
}

// splitOutputEvent recognises the exact line AppendOutputEvent writes for
// stdout or stderr and returns its type and base64 text.
func splitOutputEvent(line []byte) (typ string, b64 []byte, ok bool) {
	line = bytes.TrimSuffix(line, []byte("\r"))
	rest, found := bytes.CutPrefix(line, []byte(`{"type":"`))
	if !found {
		return "", nil, false
	}
	switch {
	case bytes.HasPrefix(rest, []byte(EventStdout+outputEventMid)):
		typ, rest = EventStdout, rest[len(EventStdout+outputEventMid):]
	case bytes.HasPrefix(rest, []byte(EventStderr+outputEventMid)):
		typ, rest = EventStderr, rest[len(EventStderr+outputEventMid):]
	default:
		return "", nil, false
	}
	b64, found = bytes.CutSuffix(rest, []byte(outputEventEnd))
	// A quote or backslash (a later field, an escape) fails the base64
	// decode, which sends the line to encoding/json. Go's base64 decoder
	// skips \r, which a JSON string may not hold raw: that is checked here
	// (a line holds no \n).
	if !found || bytes.IndexByte(b64, '\r') >= 0 {
		return "", nil, false
	}
	return typ, b64, true
}
