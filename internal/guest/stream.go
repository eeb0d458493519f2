package guest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// handleExecStream serves POST /exec/stream. The request body is NDJSON:
// one ExecRequest line, then StdinFrame lines when stdin_stream is set.
// A request that is invalid, or cannot start, is answered with an error
// status and an ErrorBody, like any other route. Once the process has
// started the answer is 200 with NDJSON ExecEvent lines: start{pid},
// stdout/stderr{data} as output arrives, keepalive after each
// KeepaliveInterval of silence, then exactly one exit (or error). A
// program that cannot be found or executed gets no start event: a stderr
// event saying so, then exit with 127 (not found) or 126 (not
// executable), as a shell would.
//
// When the client goes away (its body breaks, a write fails, or the
// connection closes) the exec's whole tree is killed.
func (s *Server) handleExecStream(w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	if err := rc.EnableFullDuplex(); err != nil {
		s.log.Warn("exec stream without full duplex: stdin frames may fail", "err", err)
	}
	rc.SetReadDeadline(time.Time{})
	dec := json.NewDecoder(r.Body)
	var req api.ExecRequest
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, badBody(err))
		return
	}
	sp, err := s.prepare(&req, true)
	if err != nil {
		s.writeError(w, err)
		return
	}
	defer sp.close()
	var p *proc
	if sp.notFound == "" {
		if p, err = s.start(sp, stdinSource{data: req.Stdin, stream: req.StdinStream}); err != nil {
			s.writeError(w, err)
			return
		}
	}
	sp.close()

	out := &eventWriter{w: w, rc: rc, enc: json.NewEncoder(w), frames: acceptsFrames(r)}
	if out.frames {
		w.Header().Set("Content-Type", api.FramesContentType)
	} else {
		w.Header().Set("Content-Type", "application/x-ndjson")
	}
	w.WriteHeader(http.StatusOK)
	out.enc.SetEscapeHTML(false)
	if p == nil {
		code := sp.notFoundCode
		out.write(&api.ExecEvent{Type: api.EventStderr, Data: []byte(sp.notFound)})
		out.write(&api.ExecEvent{Type: api.EventExit, ExitCode: &code})
		return
	}
	s.track(p)
	defer s.untrack(p)
	s.streamExec(r, rc, dec, out, p, sp)
}

// chunk is one read from an output pipe, or its end (buf nil).
type chunk struct {
	typ string
	buf *[]byte
	n   int
}

func (s *Server) streamExec(r *http.Request, rc *http.ResponseController, dec *json.Decoder, out *eventWriter, p *proc, sp *execSpec) {
	out.write(&api.ExecEvent{Type: api.EventStart, Pid: p.pid})

	// Two chunks in flight besides the two being read: a stream holds at
	// most four buffers (1 MiB) when its client reads slowly.
	chunks := make(chan chunk, 2)
	go pump(p.stdout, api.EventStdout, chunks)
	go pump(p.stderr, api.EventStderr, chunks)
	bodyDone := make(chan error, 1)
	go feedStdin(dec, p.stdin, bodyDone)

	keepalive := time.NewTimer(s.keepalive)
	defer keepalive.Stop()
	var timeout <-chan time.Time
	if sp.timeout > 0 {
		t := time.NewTimer(sp.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		grace     <-chan time.Time
		exited    = p.exited
		ctxDone   = r.Context().Done()
		body      = (<-chan error)(bodyDone)
		readers   = 2
		ws        syscall.WaitStatus
		dur       time.Duration
		timedOut  bool
		truncated bool
		sent      = map[string]int64{}
		failure   error // ends the stream with an error event
	)
	gone := func() { // the client left: stop writing, kill the tree
		out.failed = true
		if exited != nil { // once the main process ended, the exec is over
			go p.kill(s)
		}
	}
	for exited != nil || readers > 0 {
		select {
		case c := <-chunks:
			if c.buf == nil {
				readers--
				continue
			}
			// The read is at api.FrameHeaderLen, room for a frame's header.
			n := c.n
			if sp.maxOut > 0 && sent[c.typ]+int64(n) > sp.maxOut {
				n = int(sp.maxOut - sent[c.typ])
				truncated = true
			}
			sent[c.typ] += int64(n)
			if n > 0 && !out.failed {
				if out.output(c.typ, (*c.buf)[:api.FrameHeaderLen+n]) != nil {
					gone()
				}
				keepalive.Reset(s.keepalive)
			}
			putBuf(c.buf)
		case ws = <-exited:
			exited, timeout, dur = nil, nil, time.Since(p.started)
			if readers > 0 {
				t := time.NewTimer(outputGrace)
				defer t.Stop()
				grace = t.C
			}
		case <-grace:
			grace = nil
			p.stdout.SetReadDeadline(time.Now())
			p.stderr.SetReadDeadline(time.Now())
		case <-timeout:
			timedOut, timeout = true, nil
			go p.kill(s)
		case <-keepalive.C:
			if !out.failed && out.write(&api.ExecEvent{Type: api.EventKeepalive}) != nil {
				gone()
			}
			keepalive.Reset(s.keepalive)
		case err := <-body:
			body = nil
			var bad *badFrameError
			switch {
			case err == nil:
			case errors.As(err, &bad):
				failure = bad
				go p.kill(s)
			default:
				gone()
			}
		case <-ctxDone:
			ctxDone = nil
			gone()
		}
	}
	s.finish(p)
	if !out.failed {
		if failure != nil {
			out.write(&api.ExecEvent{Type: api.EventError, Error: new(errorDetail(failure))})
		} else {
			code, sig := exitStatus(ws)
			out.write(&api.ExecEvent{
				Type:       api.EventExit,
				ExitCode:   &code,
				Signal:     sig,
				TimedOut:   timedOut,
				OOMKilled:  s.oomKilled(p, ws),
				Truncated:  truncated,
				DurationMs: float64(dur.Microseconds()) / 1000,
			})
		}
	}
	if body != nil {
		// The client ends its body once it has the exit event (without
		// streamed stdin, right after the request line). Give it a moment
		// to, so that the connection closes cleanly rather than under the
		// writer's feet (a broken pipe in the daemon); then cut the read
		// so that nothing touches the request after the handler returns.
		t := time.NewTimer(bodyGrace)
		select {
		case <-body:
			body = nil
		case <-t.C:
		}
		t.Stop()
		if body != nil {
			rc.SetReadDeadline(time.Now())
			<-body
		}
	}
	// The deadline belongs to the connection, not the request: clear it,
	// or the next request on this keep-alive connection fails its first
	// read (its body, or the server's background read that cancels the
	// request's context) and loses its stream.
	rc.SetReadDeadline(time.Time{})
}

// bodyGrace is how long a stream waits, after its last event, for the
// client to end its request body.
const bodyGrace = time.Second

// pump sends what f yields to chunks, then an end marker. It reads into
// each buffer after api.FrameHeaderLen bytes, where the stream's writer
// puts a frame's header: framed output is written without a copy.
func pump(f *os.File, typ string, chunks chan<- chunk) {
	for {
		bp := getBuf()
		n, err := f.Read((*bp)[api.FrameHeaderLen:])
		if n > 0 {
			chunks <- chunk{typ: typ, buf: bp, n: n}
		} else {
			putBuf(bp)
		}
		if err != nil {
			chunks <- chunk{typ: typ}
			return
		}
	}
}

// badFrameError is a stdin frame that did not decode: the client's fault.
type badFrameError struct{ err error }

func (e *badFrameError) Error() string {
	return "stdin frame is not a valid StdinFrame JSON line (" + e.err.Error() + "); the exec was killed"
}
func (e *badFrameError) Unwrap() error { return errdefs.ErrInvalidArgument }

// feedStdin reads the StdinFrame lines after the request and writes them
// to stdin (nil when stdin is not streamed: the body is then drained).
// It reports nil at the body's clean end, a *badFrameError for a frame
// that does not decode, and any other error when the client broke off.
func feedStdin(dec *json.Decoder, stdin *os.File, done chan<- error) {
	for {
		var f api.StdinFrame
		err := dec.Decode(&f)
		if err != nil {
			if stdin != nil {
				stdin.Close()
			}
			var syn *json.SyntaxError
			var typ *json.UnmarshalTypeError
			switch {
			case errors.Is(err, io.EOF):
				err = nil
			case errors.As(err, &syn), errors.As(err, &typ):
				err = &badFrameError{err}
			}
			done <- err
			return
		}
		if stdin == nil {
			continue
		}
		if len(f.Data) > 0 {
			if _, err := stdin.Write(f.Data); err != nil {
				// The process closed its stdin or ended: drop input, but
				// keep reading to notice the client leaving.
				stdin.Close()
				stdin = nil
				continue
			}
		}
		if f.EOF {
			stdin.Close()
			stdin = nil
		}
	}
}

// eventWriter writes events, NDJSON lines or (frames) api's binary
// frames, flushing each one.
type eventWriter struct {
	w      http.ResponseWriter
	rc     *http.ResponseController
	enc    *json.Encoder
	frames bool
	line   []byte // output's buffer, reused
	failed bool
}

// acceptsFrames says the client asked for the binary framing.
func acceptsFrames(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		for f := range strings.SplitSeq(v, ",") {
			mt, _, _ := strings.Cut(f, ";")
			if strings.EqualFold(strings.TrimSpace(mt), api.FramesContentType) {
				return true
			}
		}
	}
	return false
}

// output writes a stdout or stderr event whose data is
// buf[api.FrameHeaderLen:]: framed, with its header put in the room
// before it; as NDJSON with api.AppendOutputEvent (the bytes json.Encoder
// would write, at a fraction of its cost).
func (e *eventWriter) output(typ string, buf []byte) error {
	if e.failed {
		return errStreamBroken
	}
	if e.frames {
		kind := api.FrameStdout
		if typ == api.EventStderr {
			kind = api.FrameStderr
		}
		api.PutFrameHeader(buf, kind, len(buf)-api.FrameHeaderLen)
		_, err := e.w.Write(buf)
		return e.sent(err)
	}
	e.line = api.AppendOutputEvent(e.line[:0], typ, buf[api.FrameHeaderLen:])
	_, err := e.w.Write(e.line)
	return e.sent(err)
}

func (e *eventWriter) write(ev *api.ExecEvent) error {
	if e.failed {
		return errStreamBroken
	}
	if e.frames {
		var err error
		if e.line, err = api.AppendEventFrame(e.line[:0], ev); err != nil {
			return err
		}
		_, err = e.w.Write(e.line)
		return e.sent(err)
	}
	return e.sent(e.enc.Encode(ev))
}

// sent ends a write whose error is err: it flushes the event to the
// client, and after any error the stream is broken for good.
func (e *eventWriter) sent(err error) error {
	if err == nil {
		err = e.rc.Flush()
	}
	if err != nil {
		e.failed = true
	}
	return err
}

var errStreamBroken = errors.New("stream already broken")
