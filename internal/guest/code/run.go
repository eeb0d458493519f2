package code

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// exitGrace is how long a kernel whose sockets closed has to be seen
// exiting before it is killed as a transport failure.
const exitGrace = 5 * time.Second

// keepaliveEvery is how long a run's stream may stay silent before a
// keepalive event.
var keepaliveEvery = 5 * time.Second

// Run runs req.Code in its context, calling emit with each event as it
// happens, in order, from one goroutine; the last is end_of_execution.
// An error return means nothing ran (bad request, unknown context, queue
// full, the kernel would not start); everything that happens once the
// code is sent (exceptions, timeouts, kernel deaths) is an event.
func (m *Manager) Run(ctx context.Context, req api.RunCodeRequest, emit func(api.CodeEvent)) error {
	if req.Context != "" && req.Language != "" {
		return errdefs.Invalid("give context or language, not both: a context has its language")
	}
	if req.TimeoutMs < -1 {
		return errdefs.Invalid("timeout_ms must be -1 (none), 0 (the default, %d) or positive, got %d", api.DefaultCodeTimeoutMs, req.TimeoutMs)
	}
	var c *codeContext
	var err error
	if req.Context != "" {
		c, err = m.get(req.Context)
	} else {
		c, err = m.defaultFor(req.Language)
	}
	if err != nil {
		return err
	}
	if len(req.Env) > 0 && c.spec.Language != "python" {
		return errdefs.Invalid("per-run env works in python contexts only; give env when creating the %s context instead", c.lang)
	}
	for k := range req.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return errdefs.Invalid("env name %q is not valid; names are non-empty without '=' or NUL", k)
		}
	}
	select {
	case c.queued <- struct{}{}:
	default:
		return errdefs.Exhausted("code context %q has %d runs queued, the most allowed; wait for them or use another context", c.id, maxQueued)
	}
	defer func() { <-c.queued }()
	select {
	case <-c.run:
	case <-ctx.Done():
		return ctx.Err()
	}
	defer func() { c.run <- struct{}{} }()

	start := time.Now()
	restarted := false
	c.mu.Lock()
	k := c.k
	if k != nil && k.dead() {
		c.lastExit = deathReason(k)
		c.k = nil
		go k.close()
		k = nil
	}
	if c.removed {
		c.mu.Unlock()
		return errdefs.NotFound("code context %q was removed", c.id)
	}
	c.mu.Unlock()
	if k == nil {
		c.mu.Lock()
		restarted = c.kernels > 0
		c.mu.Unlock()
		if err := m.startIn(ctx, c); err != nil {
			return err
		}
	}
	c.mu.Lock()
	k = c.k
	c.busy = true
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.busy = false
		c.mu.Unlock()
	}()

	timeout := time.Duration(req.TimeoutMs) * time.Millisecond
	if req.TimeoutMs == 0 {
		timeout = api.DefaultCodeTimeoutMs * time.Millisecond
	}
	r := &runner{m: m, c: c, k: k, emit: emit, timeout: timeout, restarted: restarted}
	if len(req.Env) > 0 {
		b, _ := json.Marshal(req.Env) // a JSON object of strings is a Python dict literal
		if _, err := k.execSilent(ctx, "import os as __ab_os\n__ab_env = "+string(b)+"\n__ab_env_prev = {k: __ab_os.environ.get(k) for k in __ab_env}\n__ab_os.environ.update(__ab_env)\n"); err != nil {
			return errdefs.Unavailable("setting the run's env in the kernel: %v", err)
		}
		defer func() {
			if !k.dead() {
				k.execSilent(context.WithoutCancel(ctx), "for __ab_k, __ab_v in __ab_env_prev.items():\n    if __ab_v is None: __ab_os.environ.pop(__ab_k, None)\n    else: __ab_os.environ[__ab_k] = __ab_v\ndel __ab_env, __ab_env_prev\n")
			}
		}()
	}
	end := r.run(ctx, req.Code)
	end.Type = api.CodeEventEnd
	end.DurationMs = float64(time.Since(start).Microseconds()) / 1000
	end.Restarted = r.restarted
	end.Context = c.id
	end.ExecutionCount = r.count
	emit(end)
	return nil
}

// runner is one execution in flight.
type runner struct {
	m         *Manager
	c         *codeContext
	k         *kernel
	emit      func(api.CodeEvent)
	timeout   time.Duration
	restarted bool
	count     int
	lastEmit  time.Time
}

func (r *runner) send(ev api.CodeEvent) {
	r.lastEmit = time.Now()
	r.emit(ev)
}

// run sends the cell and relays its messages until it ends; it returns
// the end event's status.
func (r *runner) run(ctx context.Context, code string) api.CodeEvent {
	k := r.k
	frames, id, err := k.sig.encode(k.session, "execute_request", map[string]any{
		"code": code, "silent": false, "store_history": true, "user_expressions": map[string]any{},
		"allow_stdin": false, "stop_on_error": false, // runs are serialized here: nothing queued to abort
	})
	if err != nil {
		return r.fail("EncodingError", err.Error(), api.CodeStatusError)
	}
	sb, reply := k.subscribe(id)
	defer k.unsubscribe(id, sb)
	if err := k.shell.Send(zmqMsg(frames)); err != nil {
		return r.kernelEnded()
	}
	r.lastEmit = time.Now()

	var deadline <-chan time.Time
	var deadlineTimer *time.Timer
	if r.timeout > 0 {
		deadlineTimer = time.NewTimer(r.timeout)
		defer deadlineTimer.Stop()
		deadline = deadlineTimer.C
	}
	keep := time.NewTicker(keepaliveEvery)
	defer keep.Stop()
	var graceC <-chan time.Time
	idle, replied := false, false
	status := api.CodeStatusOK
	timedOut, interrupted := false, false
	clientGone := ctx.Done()
	for {
		select {
		case msg := <-sb.ch:
			switch msg.Header.MsgType {
			case "status":
				var st struct {
					State string `json:"execution_state"`
				}
				json.Unmarshal(msg.Content, &st)
				if st.State == "idle" {
					idle = true
					if !replied {
						graceC = time.After(replyGrace)
					}
				}
			case "execute_input":
				var in struct {
					Count int `json:"execution_count"`
				}
				json.Unmarshal(msg.Content, &in)
				r.setCount(in.Count)
				r.send(api.CodeEvent{Type: api.CodeEventCount, ExecutionCount: in.Count})
			case "stream":
				var st struct{ Name, Text string }
				json.Unmarshal(msg.Content, &st)
				typ := api.CodeEventStdout
				if st.Name == "stderr" {
					typ = api.CodeEventStderr
				}
				r.send(api.CodeEvent{Type: typ, Text: st.Text, Timestamp: time.Now().UTC().Format(time.RFC3339Nano)})
			case "execute_result", "display_data", "update_display_data":
				var d struct {
					Data  map[string]json.RawMessage `json:"data"`
					Count int                        `json:"execution_count"`
				}
				json.Unmarshal(msg.Content, &d)
				res := bundle(d.Data)
				res.IsMain = msg.Header.MsgType == "execute_result"
				res.ExecutionCount = d.Count
				r.send(api.ResultEvent(res))
			case "error":
				var e struct {
					Name      string   `json:"ename"`
					Value     string   `json:"evalue"`
					Traceback []string `json:"traceback"`
				}
				json.Unmarshal(msg.Content, &e)
				status = api.CodeStatusError
				if e.Name == "KeyboardInterrupt" {
					status = api.CodeStatusInterrupted
				}
				r.send(api.ErrorEvent(api.CodeError{Name: e.Name, Value: e.Value, Traceback: stripANSI(strings.Join(e.Traceback, "\n"))}))
			}
		case msg := <-reply:
			replied = true
			var rep struct {
				Status string `json:"status"`
				Count  int    `json:"execution_count"`
			}
			json.Unmarshal(msg.Content, &rep)
			r.setCount(rep.Count)
			if rep.Status == "aborted" || rep.Status == "abort" {
				status = api.CodeStatusError
				r.send(api.ErrorEvent(api.CodeError{Name: "ExecutionAborted", Value: "the kernel aborted this execution (an earlier cell failed while it was queued)"}))
			}
		case <-graceC:
			replied = true // idle without a reply: do not wait for ever
		case <-k.ctx.Done():
			return r.kernelEnded()
		case <-deadline:
			if !timedOut && !interrupted {
				timedOut = true
				k.interrupt()
				deadlineTimer.Reset(interruptGrace)
				continue
			}
			return r.escalate(ctx, timedOut)
		case <-clientGone:
			// The caller went away: stop the cell, as a timeout would.
			clientGone = nil
			if !timedOut && !interrupted {
				interrupted = true
				k.interrupt()
				if deadlineTimer == nil {
					deadlineTimer = time.NewTimer(interruptGrace)
					defer deadlineTimer.Stop()
					deadline = deadlineTimer.C
				} else {
					deadlineTimer.Reset(interruptGrace)
				}
			}
		case <-keep.C:
			if time.Since(r.lastEmit) >= keepaliveEvery {
				r.send(api.CodeEvent{Type: api.CodeEventKeepalive})
			}
		}
		if idle && replied {
			switch {
			case timedOut:
				status = api.CodeStatusTimeout
			case interrupted:
				status = api.CodeStatusInterrupted
			}
			return api.CodeEvent{Status: status}
		}
	}
}

func (r *runner) setCount(n int) {
	if n <= 0 {
		return
	}
	r.count = n
	r.c.mu.Lock()
	r.c.count = n
	r.c.mu.Unlock()
}

func (r *runner) fail(name, value, status string) api.CodeEvent {
	r.send(api.ErrorEvent(api.CodeError{Name: name, Value: value}))
	return api.CodeEvent{Status: status}
}

// kernelEnded reports a kernel that ended under the run: restarted by
// request, or died.
func (r *runner) kernelEnded() api.CodeEvent {
	r.c.mu.Lock()
	replaced := r.c.k != r.k
	r.c.mu.Unlock()
	if replaced {
		r.restarted = true
		return r.fail("ContextRestarting", "the context was restarted or removed while this ran; its state is lost", api.CodeStatusError)
	}
	// A kernel that exits closes its sockets first: give the reaper a
	// moment to see the exit before calling it a transport failure.
	t := time.NewTimer(exitGrace)
	defer t.Stop()
	reason := ""
	select {
	case <-r.k.proc.Done():
		reason = deathReason(r.k)
	case <-t.C: // the sockets failed with the process alive: it is of no use
		reason = deathReason(r.k)
		r.k.proc.Kill()
		<-r.k.proc.Done()
	}
	r.c.mu.Lock()
	r.c.lastExit = reason
	r.c.mu.Unlock()
	return r.fail("KernelDied", "the kernel died: "+reason+"; its state is lost and the next run starts a fresh kernel", api.CodeStatusKernelDied)
}

// escalate restarts a kernel that stayed busy interruptGrace after an
// interrupt.
func (r *runner) escalate(ctx context.Context, timedOut bool) api.CodeEvent {
	c := r.c
	c.mu.Lock()
	if c.k == r.k {
		c.k = nil
	}
	c.mu.Unlock()
	r.k.shutdown(0)
	r.restarted = true
	status := api.CodeStatusInterrupted
	value := fmt.Sprintf("the kernel stayed busy %v after an interrupt and was restarted: its state is lost", interruptGrace)
	if timedOut {
		status = api.CodeStatusTimeout
		value = fmt.Sprintf("the run exceeded its timeout of %v; the kernel stayed busy %v after an interrupt and was restarted: its state is lost", r.timeout, interruptGrace)
	}
	ev := r.fail("TimeoutError", value, status)
	if err := r.m.startIn(context.WithoutCancel(ctx), c); err != nil {
		r.m.log.Warn("restarting a kernel after a timeout", "context", c.id, "err", err)
	}
	return ev
}

func deathReason(k *kernel) string {
	select {
	case <-k.proc.Done():
		return k.proc.ExitReason()
	default:
		return "its connection to the agent failed"
	}
}

// execSilent runs code with silent=True and waits for its reply.
func (k *kernel) execSilent(ctx context.Context, code string) (*message, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return k.request(ctx, k.shell, "execute_request", map[string]any{
		"code": code, "silent": true, "store_history": false, "user_expressions": map[string]any{}, "allow_stdin": false,
	})
}

// bundle maps a MIME bundle onto a result's fields.
func bundle(data map[string]json.RawMessage) api.CodeResult {
	var r api.CodeResult
	for mime, raw := range data {
		var dst *string
		switch mime {
		case "text/plain":
			dst = &r.Text
		case "text/html":
			dst = &r.HTML
		case "text/markdown":
			dst = &r.Markdown
		case "image/svg+xml":
			dst = &r.SVG
		case "image/png":
			dst = &r.PNG
		case "image/jpeg":
			dst = &r.JPEG
		case "application/pdf":
			dst = &r.PDF
		case "text/latex":
			dst = &r.LaTeX
		case "application/javascript":
			dst = &r.JavaScript
		case "application/json":
			r.JSON = raw
			continue
		default:
			if r.Extra == nil {
				r.Extra = map[string]json.RawMessage{}
			}
			r.Extra[mime] = raw
			continue
		}
		*dst = mimeText(raw)
		if mime == "image/png" || mime == "image/jpeg" || mime == "application/pdf" {
			*dst = strings.ReplaceAll(*dst, "\n", "")
		}
	}
	return r
}

// mimeText reads a MIME value: a string, or a list of lines.
func mimeText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var lines []string
	if json.Unmarshal(raw, &lines) == nil {
		return strings.Join(lines, "")
	}
	return string(raw)
}

var ansi = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]`) }) // compiled at first use, as idPattern

func stripANSI(s string) string { return ansi().ReplaceAllString(s, "") }
