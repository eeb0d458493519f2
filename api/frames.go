package api

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// The exec stream's binary framing. A client that sends
//
//	Accept: application/vnd.agentbox.frames
//
// with POST /v1/sandboxes/{id}/exec/stream may get its events as frames
// instead of NDJSON lines (the answer's Content-Type says which it got:
// an agent that predates the framing answers NDJSON). A frame is a
// FrameHeaderLen-byte header, the frame's kind and its payload's length
// as a big-endian uint32, then the payload:
//
//	kind 1 (FrameStdout): the command's stdout bytes, as they are
//	kind 2 (FrameStderr): its stderr bytes
//	kind 3 (FrameEvent):  any other ExecEvent as JSON (start, keepalive,
//	                      exit, error), the same object an NDJSON line holds
//
// Output carries no base64: the stream moves a command's output at the
// cost of a copy, where NDJSON's base64 took a quarter of the CPU on both
// ends (docs/PERFORMANCE.md, "The exec stream's throughput"). The
// request body (the ExecRequest line, then StdinFrame lines) is NDJSON
// either way.
const (
	FramesContentType = "application/vnd.agentbox.frames"
	FrameHeaderLen    = 5

	FrameStdout byte = 1
	FrameStderr byte = 2
	FrameEvent  byte = 3
)

// maxFrame bounds one frame's payload, as maxEventLine bounds a line.
const maxFrame = maxEventLine

// PutFrameHeader writes the header of a frame of kind carrying n bytes
// into h[:FrameHeaderLen].
func PutFrameHeader(h []byte, kind byte, n int) {
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:FrameHeaderLen], uint32(n))
}

// AppendEventFrame appends ev as a frame: an output event as its raw
// bytes, any other as JSON.
func AppendEventFrame(dst []byte, ev *ExecEvent) ([]byte, error) {
	start := len(dst)
	dst = append(dst, make([]byte, FrameHeaderLen)...)
	switch ev.Type {
	case EventStdout, EventStderr:
		dst = append(dst, ev.Data...)
		PutFrameHeader(dst[start:], outputKind(ev.Type), len(ev.Data))
		return dst, nil
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return dst[:start], err
	}
	dst = append(dst, b...)
	PutFrameHeader(dst[start:], FrameEvent, len(b))
	return dst, nil
}

func outputKind(typ string) byte {
	if typ == EventStderr {
		return FrameStderr
	}
	return FrameStdout
}

// EventSource is what reads an exec stream's events, in either format.
type EventSource interface {
	// Next reads the next event into ev, replacing what ev held; ev.Data
	// is the caller's to keep. io.EOF at the stream's clean end,
	// io.ErrUnexpectedEOF when it is cut inside an event.
	Next(ev *ExecEvent) error
}

// NewStreamReader reads the events of an exec stream answered with
// Content-Type contentType: frames, or NDJSON for anything else.
func NewStreamReader(contentType string, r io.Reader) EventSource {
	if mediaType(contentType) == FramesContentType {
		return NewFrameReader(r)
	}
	return NewEventReader(r)
}

func mediaType(ct string) string {
	for i := 0; i < len(ct); i++ {
		if ct[i] == ';' || ct[i] == ' ' {
			return ct[:i]
		}
	}
	return ct
}

// FrameReader reads the events of a framed exec stream.
type FrameReader struct {
	r   *bufio.Reader
	hdr [FrameHeaderLen]byte
	// Reuse makes an output event's Data the reader's own buffer, valid
	// until the next call, for a caller that writes it out at once: no
	// allocation per frame.
	Reuse bool
	buf   []byte
}

// NewFrameReader reads frames from r.
func NewFrameReader(r io.Reader) *FrameReader {
	return &FrameReader{r: bufio.NewReaderSize(r, 256<<10)}
}

// Next reads the next frame's event into ev (see EventSource). A frame of
// an unknown kind, or longer than 64 MiB, is an error: the stream is not
// one this reader knows how to go on with.
func (fr *FrameReader) Next(ev *ExecEvent) error {
	if _, err := io.ReadFull(fr.r, fr.hdr[:]); err != nil {
		return err // io.EOF before a header; ErrUnexpectedEOF inside one
	}
	kind, n := fr.hdr[0], binary.BigEndian.Uint32(fr.hdr[1:])
	if n > maxFrame {
		return fmt.Errorf("an exec stream frame of %d bytes is over %d MiB: not an exec stream", n, maxFrame>>20)
	}
	if kind != FrameStdout && kind != FrameStderr && kind != FrameEvent {
		return fmt.Errorf("exec stream frame of unknown kind %d", kind)
	}
	var payload []byte
	if fr.Reuse && kind != FrameEvent {
		if cap(fr.buf) < int(n) {
			fr.buf = make([]byte, n)
		}
		payload = fr.buf[:n]
	} else {
		payload = make([]byte, n)
	}
	if _, err := io.ReadFull(fr.r, payload); err != nil {
		if errors.Is(err, io.EOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	*ev = ExecEvent{}
	switch kind {
	case FrameStdout:
		ev.Type, ev.Data = EventStdout, payload
	case FrameStderr:
		ev.Type, ev.Data = EventStderr, payload
	default:
		if err := json.Unmarshal(payload, ev); err != nil {
			return fmt.Errorf("exec stream event frame: %w", err)
		}
	}
	return nil
}
