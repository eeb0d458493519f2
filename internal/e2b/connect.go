package e2b

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// The Connect protocol (connectrpc.com, protocol version 1) as E2B's SDKs
// speak it to envd, written out by hand: both SDKs use only its JSON
// codec, never the binary one, never compression, GET, gRPC or client
// streams (spec §4.1). A unary call is a JSON body both ways; a server
// stream is one enveloped request message, then envelopes of messages and
// a final end-of-stream envelope. That is small enough that a generated
// Connect stack (protoc, two plugins, protobuf-go and connect-go as
// dependencies) would add more than it saves; the messages are the Go
// structs in process.go and filesystem.go, whose JSON is proto3 JSON.

// maxMessage bounds one request message (a SendInput carries stdin).
const maxMessage = 16 << 20

// connectError is a Connect error: a code (snake_case) and a message.
type connectError struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// errorOf translates an agentbox error into a Connect error; the codes of
// errdefs are Connect's own names.
func errorOf(err error) *connectError {
	code, _ := errdefs.Code(err)
	return &connectError{Code: code, Message: err.Error()}
}

// connectStatus is the HTTP status of a unary error, by Connect code.
var connectStatus = map[string]int{
	"canceled": 499, "unknown": 500, "invalid_argument": 400, "deadline_exceeded": 504,
	"not_found": 404, "already_exists": 409, "permission_denied": 403, "resource_exhausted": 429,
	"failed_precondition": 400, "aborted": 409, "out_of_range": 400, "unimplemented": 501,
	"internal": 500, "unavailable": 503, "data_loss": 500, "unauthenticated": 401,
}

// readUnary decodes a unary request's JSON body into v.
func readUnary(r *http.Request, v any) *connectError {
	b, err := io.ReadAll(io.LimitReader(r.Body, maxMessage+1))
	if err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request: " + err.Error()}
	}
	if len(b) > maxMessage {
		return &connectError{Code: "resource_exhausted", Message: "request message over " + strconv.Itoa(maxMessage) + " bytes"}
	}
	if len(b) == 0 {
		return nil
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &connectError{Code: "invalid_argument", Message: "the request message is not valid JSON for it: " + err.Error()}
	}
	return nil
}

func writeUnary(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

func writeConnectUnaryError(w http.ResponseWriter, e connectError) {
	status, ok := connectStatus[e.Code]
	if !ok {
		status = http.StatusInternalServerError
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(e)
}

// Envelope flags.
const (
	flagCompressed = 0x01
	flagEndStream  = 0x02
)

// readStreamRequest decodes the one enveloped message of a server-stream
// request into v.
func readStreamRequest(r *http.Request, v any) *connectError {
	var hdr [5]byte
	if _, err := io.ReadFull(r.Body, hdr[:]); err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request envelope: " + err.Error()}
	}
	if hdr[0]&flagCompressed != 0 {
		return &connectError{Code: "internal", Message: "compressed request messages are not supported; send them uncompressed"}
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > maxMessage {
		return &connectError{Code: "resource_exhausted", Message: "request message over " + strconv.Itoa(maxMessage) + " bytes"}
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(r.Body, b); err != nil {
		return &connectError{Code: "invalid_argument", Message: "reading the request message: " + err.Error()}
	}
	if err := json.Unmarshal(b, v); err != nil {
		return &connectError{Code: "invalid_argument", Message: "the request message is not valid JSON for it: " + err.Error()}
	}
	return nil
}

// stream is the response of a server-stream call. Its methods are safe
// for concurrent use (keepalives come from their own goroutine).
type stream struct {
	mu    sync.Mutex
	w     io.Writer
	flush func()
	ended bool
}

// newStream starts a stream's response: 200, the Connect stream type.
// Errors from here on travel in the end-of-stream envelope.
func newStream(w http.ResponseWriter) *stream {
	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	return &stream{w: w, flush: flush}
}

func (s *stream) writeLocked(flags byte, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var hdr [5]byte
	hdr[0] = flags
	binary.BigEndian.PutUint32(hdr[1:], uint32(len(b)))
	if _, err := s.w.Write(append(hdr[:], b...)); err != nil {
		return err
	}
	s.flush()
	return nil
}

// send writes one message.
func (s *stream) send(v any) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return errors.New("stream ended")
	}
	return s.writeLocked(0, v)
}

// end writes the end-of-stream envelope, carrying e if not nil; later
// sends fail.
func (s *stream) end(e *connectError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		return
	}
	s.ended = true
	body := struct {
		Error *connectError `json:"error,omitempty"`
	}{e}
	_ = s.writeLocked(flagEndStream, body)
}

// keepalive sends msg every interval until stop is closed; the caller
// waits for the returned channel to close. The interval is the client's
// Keepalive-Ping-Interval in seconds (envd's default is 90).
func (s *stream) keepalive(r *http.Request, msg any, stop <-chan struct{}) <-chan struct{} {
	interval := 90 * time.Second
	if n, err := strconv.Atoi(r.Header.Get("Keepalive-Ping-Interval")); err == nil && n > 0 {
		interval = time.Duration(n) * time.Second
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(interval)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
				if s.send(msg) != nil {
					return
				}
			}
		}
	}()
	return done
}

// timeoutOf is a stream's Connect-Timeout-Ms; 0 for none.
func timeoutOf(r *http.Request) int64 {
	n, err := strconv.ParseInt(r.Header.Get("Connect-Timeout-Ms"), 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}
