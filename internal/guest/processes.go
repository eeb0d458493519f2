package guest

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// Background processes: started detached with POST /processes, they live
// in the agent, independent of any request, with their stdout and stderr
// kept in ring buffers (ring.go) that any number of clients can read or
// follow from any offset, as often as they like.

// maxExitedProcs bounds how many ended processes stay listed (with their
// output) before the oldest are forgotten.
const maxExitedProcs = 256

// maxOutputRead caps the bytes of each stream in one output answer.
const maxOutputRead = 16 << 20

// bgProc is one background process.
type bgProc struct {
	p              *proc
	tag            string
	cmd            []string
	stdout, stderr *ring
	// done closes when the process has ended and its output is complete.
	done chan struct{}

	// stdinMu serialises stdin writers and guards stdinClosed.
	stdinMu     sync.Mutex
	stdinClosed bool

	// mu guards the exit fields.
	mu        sync.Mutex
	exited    bool
	code      int
	signal    string
	timedOut  bool
	oomKilled bool
	ended     time.Time
}

func (b *bgProc) info() api.Process {
	b.mu.Lock()
	defer b.mu.Unlock()
	pr := api.Process{Pid: b.p.pid, Tag: b.tag, Cmd: b.cmd, State: api.ProcessRunning, StartedAt: b.p.started.UTC()}
	if b.exited {
		pr.State = api.ProcessExited
		pr.ExitCode = new(b.code)
		pr.Signal = b.signal
		pr.TimedOut = b.timedOut
		pr.OOMKilled = b.oomKilled
		pr.EndedAt = new(b.ended.UTC())
	}
	return pr
}

func (b *bgProc) running() bool {
	select {
	case <-b.done:
		return false
	default:
		return true
	}
}

// procTable holds the background processes, in start order.
type procTable struct {
	// mu guards list.
	mu   sync.Mutex
	list []*bgProc
}

// add records b, refusing a tag that a running process holds; an ended
// process with the same tag is forgotten, as are the oldest ended ones
// past maxExitedProcs.
func (t *procTable) add(b *bgProc) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if b.tag != "" {
		for _, o := range t.list {
			if o.tag == b.tag && o.running() {
				return errdefs.New(errdefs.ErrAlreadyExists, "tag %q is taken by running process %d; pick another tag or stop that process", b.tag, o.p.pid)
			}
		}
		t.list = slices.DeleteFunc(t.list, func(o *bgProc) bool { return o.tag == b.tag })
	}
	t.list = append(t.list, b)
	exited := 0
	for _, o := range t.list {
		if !o.running() {
			exited++
		}
	}
	if exited > maxExitedProcs {
		drop := exited - maxExitedProcs
		t.list = slices.DeleteFunc(t.list, func(o *bgProc) bool {
			if drop > 0 && !o.running() {
				drop--
				return true
			}
			return false
		})
	}
	return nil
}

// lookup finds a process by pid or tag.
func (t *procTable) lookup(ref string) (*bgProc, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	pid, err := strconv.Atoi(ref)
	for i := len(t.list) - 1; i >= 0; i-- {
		b := t.list[i]
		if (err == nil && b.p.pid == pid) || (err != nil && b.tag == ref) {
			return b, nil
		}
	}
	return nil, errdefs.NotFound("no background process with pid or tag %q; list them with GET /processes", ref)
}

func (t *procTable) remove(b *bgProc) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.list = slices.DeleteFunc(t.list, func(o *bgProc) bool { return o == b })
}

func (t *procTable) snapshot() []*bgProc {
	t.mu.Lock()
	defer t.mu.Unlock()
	return slices.Clone(t.list)
}

func (s *Server) registerProcesses(mux *http.ServeMux) {
	mux.HandleFunc(proto.ProcessStart.Pattern(), s.handleStartProcess)
	mux.HandleFunc(proto.ProcessList.Pattern(), s.handleListProcesses)
	mux.HandleFunc(proto.ProcessGet.Pattern(), s.withProc(func(w http.ResponseWriter, r *http.Request, b *bgProc) {
		writeJSON(w, http.StatusOK, b.info())
	}))
	mux.HandleFunc(proto.ProcessKill.Pattern(), s.withProc(s.handleKillProcess))
	mux.HandleFunc(proto.ProcessOutput.Pattern(), s.withProc(s.handleProcessOutput))
	mux.HandleFunc(proto.ProcessStream.Pattern(), s.withProc(s.handleProcessStream))
	mux.HandleFunc(proto.ProcessWait.Pattern(), s.withProc(s.handleWaitProcess))
	mux.HandleFunc(proto.ProcessStdin.Pattern(), s.withProc(s.handleProcessStdin))
	mux.HandleFunc(proto.ProcessSignal.Pattern(), s.withProc(s.handleSignalProcess))
}

func (s *Server) withProc(h func(http.ResponseWriter, *http.Request, *bgProc)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, err := s.procs.lookup(r.PathValue("ref"))
		if err != nil {
			s.writeError(w, err)
			return
		}
		h(w, r, b)
	}
}

func (s *Server) handleStartProcess(w http.ResponseWriter, r *http.Request) {
	var req api.StartProcessRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		s.writeError(w, errdefs.Invalid("process request is not valid JSON (%v); send one StartProcessRequest object", err))
		return
	}
	b, err := s.startBackground(&req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, b.info())
}

// checkStartProcess checks what can be checked of a start request
// without touching the system (the exec fields: validate).
func checkStartProcess(req *api.StartProcessRequest) error {
	switch {
	case req.MaxBufferBytes < 0 || req.MaxBufferBytes > api.MaxProcessBuffer:
		return errdefs.Invalid("max_buffer_bytes must be between 0 (default %d) and %d, got %d", api.DefaultProcessBuffer, api.MaxProcessBuffer, req.MaxBufferBytes)
	case len(req.Tag) > 128 || strings.ContainsAny(req.Tag, "/\x00"):
		return errdefs.Invalid("tag must be at most 128 characters without '/' or NUL, got %q", req.Tag)
	}
	if _, err := strconv.Atoi(req.Tag); err == nil {
		return errdefs.Invalid("tag %q is a number and would be read as a pid; use a name", req.Tag)
	}
	return nil
}

// startBackground starts req detached and supervises it until it ends.
func (s *Server) startBackground(req *api.StartProcessRequest) (*bgProc, error) {
	if err := checkStartProcess(req); err != nil {
		return nil, err
	}
	ereq := &api.ExecRequest{Cmd: req.Cmd, Shell: req.Shell, Env: req.Env, Cwd: req.Cwd, User: req.User, TimeoutMs: req.TimeoutMs}
	sp, err := s.prepare(ereq, true)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	if sp.notFound != "" {
		return nil, errdefs.Invalid("%s", strings.TrimSpace(strings.TrimPrefix(sp.notFound, "agentbox: ")))
	}
	size := int(req.MaxBufferBytes)
	if size == 0 {
		size = api.DefaultProcessBuffer
	}
	cmd := req.Cmd
	if req.Shell != "" {
		cmd = []string{"/bin/sh", "-c", req.Shell}
	}
	b := &bgProc{tag: req.Tag, cmd: cmd, stdout: newRing(size), stderr: newRing(size), done: make(chan struct{})}
	// Hold the table while starting, so that two requests cannot both
	// take one tag.
	if req.Tag != "" {
		if o, err := s.procs.lookup(req.Tag); err == nil && o.running() {
			return nil, errdefs.New(errdefs.ErrAlreadyExists, "tag %q is taken by running process %d; pick another tag or stop that process", req.Tag, o.p.pid)
		}
	}
	p, err := s.start(sp, stdinSource{stream: true})
	if err != nil {
		return nil, err
	}
	if p == nil {
		return nil, errdefs.Invalid("%s", strings.TrimSpace(strings.TrimPrefix(sp.notFound, "agentbox: ")))
	}
	b.p = p
	s.track(p)
	if err := s.procs.add(b); err != nil {
		go p.kill(s)
		go s.supervise(b, 0)
		return nil, err
	}
	go s.supervise(b, sp.timeout)
	return b, nil
}

// supervise copies the process's output into its rings and records its
// end. It returns once the process has ended and its output is closed.
func (s *Server) supervise(b *bgProc, timeout time.Duration) {
	p := b.p
	defer s.untrack(p)
	readers := make(chan struct{}, 2)
	go drainInto(p.stdout, b.stdout, readers)
	go drainInto(p.stderr, b.stderr, readers)
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	var ws syscall.WaitStatus
	timedOut := false
wait:
	for {
		select {
		case ws = <-p.exited:
			break wait
		case <-deadline:
			deadline, timedOut = nil, true
			go p.kill(s)
		}
	}
	waitReaders(readers, 2, p.stdout, p.stderr)
	s.finish(p)
	b.mu.Lock()
	b.exited = true
	b.code, b.signal = exitStatus(ws)
	b.timedOut = timedOut
	b.oomKilled = s.oomKilled(p, ws)
	b.ended = time.Now()
	b.mu.Unlock()
	b.stdout.close()
	b.stderr.close()
	close(b.done)
}

// drainInto copies f into r until f ends.
func drainInto(f *os.File, r *ring, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	bp := getBuf()
	defer putBuf(bp)
	for {
		n, err := f.Read(*bp)
		if n > 0 {
			r.write((*bp)[:n])
		}
		if err != nil {
			return
		}
	}
}

func (s *Server) handleListProcesses(w http.ResponseWriter, r *http.Request) {
	list := api.ProcessList{Processes: []api.Process{}}
	for _, b := range s.procs.snapshot() {
		list.Processes = append(list.Processes, b.info())
	}
	writeJSON(w, http.StatusOK, list)
}

// offsets reads stdout_offset and stderr_offset (default 0).
func offsets(r *http.Request) (out, errOff int64, err error) {
	q := r.URL.Query()
	for _, f := range []struct {
		name string
		v    *int64
	}{{"stdout_offset", &out}, {"stderr_offset", &errOff}} {
		s := q.Get(f.name)
		if s == "" {
			continue
		}
		n, perr := strconv.ParseInt(s, 10, 64)
		if perr != nil || n < 0 {
			return 0, 0, errdefs.Invalid("%s must be a byte offset (0 or more), got %q", f.name, s)
		}
		*f.v = n
	}
	return out, errOff, nil
}

func (s *Server) handleProcessOutput(w http.ResponseWriter, r *http.Request, b *bgProc) {
	so, eo, err := offsets(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	// The state first: if it says exited, the rings were closed before,
	// so what is read below is the whole output.
	info := b.info()
	res := api.ProcessOutput{State: info.State, ExitCode: info.ExitCode}
	var outSpans, errSpans []span
	res.Stdout, res.StdoutOffset, res.StdoutDropped, _, _, outSpans = b.stdout.readSpans(so, maxOutputRead)
	res.Stderr, res.StderrOffset, res.StderrDropped, _, _, errSpans = b.stderr.readSpans(eo, maxOutputRead)
	if r.URL.Query().Get("chunks") == "true" {
		res.Chunks = mergeSpans(outSpans, errSpans)
	}
	writeJSON(w, http.StatusOK, res)
}

// mergeSpans puts two streams' spans (each oldest first) in one list,
// oldest first; stdout goes first at equal times.
func mergeSpans(out, errs []span) []api.OutputChunk {
	chunks := make([]api.OutputChunk, 0, len(out)+len(errs))
	for len(out) > 0 || len(errs) > 0 {
		if len(errs) == 0 || len(out) > 0 && !errs[0].t.Before(out[0].t) {
			chunks = append(chunks, api.OutputChunk{Stream: api.EventStdout, Offset: out[0].off, Length: out[0].n, Time: out[0].t})
			out = out[1:]
			continue
		}
		chunks = append(chunks, api.OutputChunk{Stream: api.EventStderr, Offset: errs[0].off, Length: errs[0].n, Time: errs[0].t})
		errs = errs[1:]
	}
	return chunks
}

// handleProcessStream follows a process's output from the requested
// offsets (or from now) until it ends, as NDJSON ExecEvents, with
// keepalives and no deadline; the last event is exit.
func (s *Server) handleProcessStream(w http.ResponseWriter, r *http.Request, b *bgProc) {
	so, eo, err := offsets(r)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if r.URL.Query().Get("from") == "now" {
		so, eo = b.stdout.offset(), b.stderr.offset()
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	out := &eventWriter{w: w, rc: rc, enc: json.NewEncoder(w)}
	out.enc.SetEscapeHTML(false)
	keepalive := time.NewTimer(s.keepalive)
	defer keepalive.Stop()
	withChunks := r.URL.Query().Get("chunks") == "true"
	streams := []struct {
		typ string
		r   *ring
		off *int64
	}{{api.EventStdout, b.stdout, &so}, {api.EventStderr, b.stderr, &eo}}
	for {
		var (
			wake  [2]<-chan struct{}
			read  [2][]byte
			spans [2][]span
		)
		ended, sent := 0, false
		for i, st := range streams {
			data, next, _, eof, ch, sp := st.r.readSpans(*st.off, readBufSize)
			wake[i], read[i], spans[i] = ch, data, sp
			if eof {
				ended++
			}
			if len(data) == 0 {
				continue
			}
			if !withChunks {
				if out.write(&api.ExecEvent{Type: st.typ, Data: data, Offset: new(next - int64(len(data)))}) != nil {
					return
				}
			}
			*st.off, sent = next, true
		}
		if withChunks && sent {
			// One event per chunk, both streams in the order written.
			base := [2]int64{so - int64(len(read[0])), eo - int64(len(read[1]))}
			for _, c := range mergeSpans(spans[0], spans[1]) {
				i := 0
				if c.Stream == api.EventStderr {
					i = 1
				}
				at := c.Offset - base[i]
				if out.write(&api.ExecEvent{Type: c.Stream, Data: read[i][at : at+c.Length], Offset: new(c.Offset), Time: new(c.Time)}) != nil {
					return
				}
			}
		}
		if ended == 2 {
			info := b.info()
			out.write(&api.ExecEvent{Type: api.EventExit, ExitCode: info.ExitCode, Signal: info.Signal, TimedOut: info.TimedOut, OOMKilled: info.OOMKilled,
				DurationMs: float64(info.EndedAt.Sub(info.StartedAt).Microseconds()) / 1000})
			return
		}
		if sent {
			keepalive.Reset(s.keepalive)
			continue
		}
		select {
		case <-wake[0]:
		case <-wake[1]:
		case <-keepalive.C:
			if out.write(&api.ExecEvent{Type: api.EventKeepalive}) != nil {
				return
			}
			keepalive.Reset(s.keepalive)
		case <-r.Context().Done():
			return
		}
	}
}

func (s *Server) handleWaitProcess(w http.ResponseWriter, r *http.Request, b *bgProc) {
	var timeout <-chan time.Time
	ms := int64(0)
	if v := r.URL.Query().Get("timeout_ms"); v != "" {
		var err error
		if ms, err = strconv.ParseInt(v, 10, 64); err != nil || ms < 0 {
			s.writeError(w, errdefs.Invalid("timeout_ms must be 0 (no limit) or positive, got %q", v))
			return
		}
	}
	if ms > 0 {
		t := time.NewTimer(time.Duration(ms) * time.Millisecond)
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-b.done:
		writeJSON(w, http.StatusOK, b.info())
	case <-timeout:
		s.writeError(w, errdefs.New(errdefs.ErrDeadlineExceeded, "process %d is still running after %d ms; wait again, or signal or kill it", b.p.pid, ms))
	case <-r.Context().Done():
	}
}

func (s *Server) handleProcessStdin(w http.ResponseWriter, r *http.Request, b *bgProc) {
	eof := r.URL.Query().Get("eof") == "true"
	b.stdinMu.Lock()
	defer b.stdinMu.Unlock()
	if b.stdinClosed {
		s.writeError(w, errdefs.Precondition("stdin of process %d is already closed", b.p.pid))
		return
	}
	stdin := b.p.stdin
	// A deadline left by an earlier request that gave up must not cut
	// this one.
	_ = stdin.SetWriteDeadline(time.Time{})
	// The process may not read: let a client that gives up cut the write.
	// The watcher ends before the handler returns, so it cannot fire on
	// the context's cancellation after a successful write.
	stop, watched := make(chan struct{}), make(chan struct{})
	defer func() { close(stop); <-watched }()
	go func() {
		defer close(watched)
		select {
		case <-r.Context().Done():
			stdin.SetWriteDeadline(time.Now())
		case <-stop:
		}
	}()
	_, err := io.Copy(stdin, r.Body)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) || errors.Is(err, os.ErrClosed) || errors.Is(err, syscall.EPIPE) {
			b.stdinClosed = true
			stdin.Close()
			s.writeError(w, errdefs.Precondition("process %d does not read its stdin any more (it closed it or ended)", b.p.pid))
			return
		}
		s.writeError(w, errdefs.Invalid("reading the request body: %v", err))
		return
	}
	if eof {
		b.stdinClosed = true
		stdin.Close()
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) handleSignalProcess(w http.ResponseWriter, r *http.Request, b *bgProc) {
	var req api.SignalRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 64<<10)).Decode(&req); err != nil {
		s.writeError(w, errdefs.Invalid("signal request is not valid JSON (%v); send {\"signal\": \"SIGINT\"}", err))
		return
	}
	sig, err := signalByName(req.Signal)
	if err != nil {
		s.writeError(w, err)
		return
	}
	if !b.running() {
		s.writeError(w, errdefs.Precondition("process %d has already exited", b.p.pid))
		return
	}
	if err := signalTree(b.p, sig, req.Tree); err != nil {
		s.writeError(w, errdefs.Precondition("signalling process %d: %v", b.p.pid, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// handleKillProcess kills the process's whole tree, waits for its end,
// and forgets it.
func (s *Server) handleKillProcess(w http.ResponseWriter, r *http.Request, b *bgProc) {
	if b.running() {
		go b.p.kill(s)
		select {
		case <-b.done:
		case <-time.After(15 * time.Second):
			s.writeError(w, errdefs.Unavailable("process %d did not end within 15 s of SIGKILL", b.p.pid))
			return
		}
	}
	s.procs.remove(b)
	w.WriteHeader(http.StatusNoContent)
}
