package e2b

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// envd's process.Process service (spec §4.2) on agentbox's background
// processes: every command, foreground or not, is one, so that its pid
// serves Connect, SendInput, SendSignal and List like envd's.

type processConfig struct {
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Envs map[string]string `json:"envs,omitempty"`
	Cwd  *string           `json:"cwd,omitempty"`
}

type processSelector struct {
	Pid *uint32 `json:"pid,omitempty"`
	Tag *string `json:"tag,omitempty"`
}

// ref is the selector as agentbox's process routes take it.
func (s processSelector) ref() (string, *connectError) {
	switch {
	case s.Pid != nil:
		return strconv.FormatUint(uint64(*s.Pid), 10), nil
	case s.Tag != nil && *s.Tag != "":
		return *s.Tag, nil
	}
	return "", &connectError{Code: "invalid_argument", Message: "the process selector names neither a pid nor a tag"}
}

type startRequest struct {
	Process processConfig `json:"process"`
	Pty     *ptySize      `json:"pty"`
	Tag     *string       `json:"tag"`
	Stdin   *bool         `json:"stdin"`
}

type processEvent struct {
	Start     *startEvent `json:"start,omitempty"`
	Data      *dataEvent  `json:"data,omitempty"`
	End       *endEvent   `json:"end,omitempty"`
	Keepalive *struct{}   `json:"keepalive,omitempty"`
}

type startEvent struct {
	Pid uint32 `json:"pid"`
}

type dataEvent struct {
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	Pty    []byte `json:"pty,omitempty"`
}

type endEvent struct {
	ExitCode int32   `json:"exitCode"`
	Exited   bool    `json:"exited"`
	Status   string  `json:"status"`
	Error    *string `json:"error,omitempty"`
}

// eventMessage is StartResponse and ConnectResponse.
type eventMessage struct {
	Event processEvent `json:"event"`
}

func (h *Handler) processStart(w http.ResponseWriter, r *http.Request, k *call) {
	var in startRequest
	if e := readStreamRequest(r, &in); e != nil {
		newStream(w).end(e)
		return
	}
	s := newStream(w)
	if in.Process.Cmd == "" {
		s.end(&connectError{Code: "invalid_argument", Message: "process.cmd is required"})
		return
	}
	if in.Pty != nil {
		h.ptyStart(r, s, k, &in)
		return
	}
	req := api.StartProcessRequest{
		Cmd:  append([]string{in.Process.Cmd}, in.Process.Args...),
		Env:  in.Process.Envs,
		User: k.user,
		// envd kills the command when the call's deadline passes.
		TimeoutMs: timeoutOf(r),
	}
	if in.Tag != nil {
		req.Tag = *in.Tag
	}
	cwd, err := h.cwdOf(r, k, in.Process.Cwd)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	req.Cwd = cwd
	p, err := k.c.StartProcess(r.Context(), k.id, req)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	if s.send(eventMessage{processEvent{Start: &startEvent{Pid: uint32(p.Pid)}}}) != nil {
		return
	}
	ref := strconv.Itoa(p.Pid)
	closed := make(chan struct{})
	if in.Stdin != nil && !*in.Stdin {
		// Without stdin the command reads end of file at once, as under
		// envd; the stream does not wait for it.
		go func() {
			defer close(closed)
			ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 30*time.Second)
			defer cancel()
			_ = k.c.WriteStdin(ctx, k.id, ref, nil, true)
		}()
	} else {
		close(closed)
	}
	h.follow(r, s, k, ref, client.StreamOptions{}, req.TimeoutMs)
	<-closed
}

// follow streams a process's output as data events until it ends, then
// its end event and the end of the stream. A process killed at its
// timeout ends the stream with deadline_exceeded, as envd's does.
func (h *Handler) follow(r *http.Request, s *stream, k *call, ref string, opts client.StreamOptions, timeoutMs int64) {
	stop := make(chan struct{})
	done := s.keepalive(r, eventMessage{processEvent{Keepalive: &struct{}{}}}, stop)
	defer func() { close(stop); <-done }()
	exit, err := k.c.StreamProcess(r.Context(), k.id, ref, opts, func(ev *api.ExecEvent) error {
		d := &dataEvent{Stdout: ev.Data}
		if ev.Type == api.EventStderr {
			d = &dataEvent{Stderr: ev.Data}
		}
		return s.send(eventMessage{processEvent{Data: d}})
	})
	switch {
	case r.Context().Err() != nil:
		return // the client went away (a background command's disconnect)
	case err != nil:
		h.log.Debug("e2b: a process stream ended without the exit", "sandbox", k.id, "process", ref, "err", err)
		s.end(h.rpcError(r, k, err))
		return
	case exit.TimedOut:
		s.end(&connectError{Code: "deadline_exceeded", Message: "the command was killed at its timeout of " + strconv.FormatInt(timeoutMs, 10) + " ms"})
		return
	}
	if s.send(eventMessage{processEvent{End: endOf(exit)}}) == nil {
		s.end(nil)
	}
}

// endOf is envd's end event for agentbox's exit event: the status is what
// Go's ProcessState.String says, as envd's is.
func endOf(exit *api.ExecEvent) *endEvent {
	e := &endEvent{Exited: true}
	switch {
	case exit.Signal != "":
		e.ExitCode = -1
		e.Exited = false
		e.Status = "signal: " + strings.ToLower(strings.TrimPrefix(exit.Signal, "SIG"))
		if exit.Signal == "SIGKILL" {
			e.Status = "signal: killed"
		}
	case exit.ExitCode != nil:
		e.ExitCode = int32(*exit.ExitCode)
		e.Status = "exit status " + strconv.Itoa(*exit.ExitCode)
	}
	if e.ExitCode != 0 {
		msg := e.Status
		e.Error = &msg
	}
	return e
}

func (h *Handler) processConnect(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Process processSelector `json:"process"`
	}
	if e := readStreamRequest(r, &in); e != nil {
		newStream(w).end(e)
		return
	}
	s := newStream(w)
	ref, e := in.Process.ref()
	if e != nil {
		s.end(e)
		return
	}
	p, err := k.c.GetProcess(r.Context(), k.id, ref)
	if err == nil && p.State != api.ProcessRunning {
		err = errdefs.NotFound("process %s has ended", ref)
	}
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	if s.send(eventMessage{processEvent{Start: &startEvent{Pid: uint32(p.Pid)}}}) != nil {
		return
	}
	h.follow(r, s, k, ref, client.StreamOptions{FromNow: true}, 0)
}

type processInfo struct {
	Config processConfig `json:"config"`
	Pid    uint32        `json:"pid"`
	Tag    *string       `json:"tag,omitempty"`
}

func (h *Handler) processList(w http.ResponseWriter, r *http.Request, k *call) {
	if e := readUnary(r, &struct{}{}); e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	ps, err := k.c.ListProcesses(r.Context(), k.id)
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	out := struct {
		Processes []processInfo `json:"processes"`
	}{Processes: []processInfo{}}
	for _, p := range ps {
		if p.State != api.ProcessRunning {
			continue
		}
		pi := processInfo{Pid: uint32(p.Pid)}
		if len(p.Cmd) > 0 {
			pi.Config = processConfig{Cmd: p.Cmd[0], Args: p.Cmd[1:]}
		}
		if p.Tag != "" {
			pi.Tag = &p.Tag
		}
		out.Processes = append(out.Processes, pi)
	}
	writeUnary(w, out)
}

func (h *Handler) processSendInput(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Process processSelector `json:"process"`
		Input   struct {
			Stdin []byte `json:"stdin"`
			Pty   []byte `json:"pty"`
		} `json:"input"`
	}
	if e := readUnary(r, &in); e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	ref, e := in.Process.ref()
	if e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	if in.Input.Pty != nil {
		if e := h.ptyInput(k, ref, in.Input.Pty); e != nil {
			writeConnectUnaryError(w, *e)
			return
		}
		writeUnary(w, struct{}{})
		return
	}
	if err := k.c.WriteStdin(r.Context(), k.id, ref, bytes.NewReader(in.Input.Stdin), false); err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, struct{}{})
}

func (h *Handler) processCloseStdin(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Process processSelector `json:"process"`
	}
	if e := readUnary(r, &in); e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	ref, e := in.Process.ref()
	if e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	if err := k.c.WriteStdin(r.Context(), k.id, ref, nil, true); err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, struct{}{})
}

func (h *Handler) processSendSignal(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Process processSelector `json:"process"`
		Signal  any             `json:"signal"`
	}
	if e := readUnary(r, &in); e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	ref, e := in.Process.ref()
	if e != nil {
		writeConnectUnaryError(w, *e)
		return
	}
	var sig string
	switch in.Signal {
	case "SIGNAL_SIGKILL", float64(9):
		sig = "SIGKILL"
	case "SIGNAL_SIGTERM", float64(15):
		sig = "SIGTERM"
	default:
		writeConnectUnaryError(w, connectError{Code: "invalid_argument", Message: "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM"})
		return
	}
	err := k.c.SignalProcess(r.Context(), k.id, ref, sig, true)
	if pid, perr := strconv.Atoi(ref); errors.Is(err, errdefs.ErrNotFound) && perr == nil {
		// Not a command: a PTY (pty.kill), which ends whole.
		err = k.c.KillPTY(r.Context(), k.id, pid)
	}
	if errors.Is(err, errdefs.ErrFailedPrecondition) {
		// agentbox keeps an ended process listed; envd has forgotten it.
		err = errdefs.NotFound("process %s has ended", ref)
	}
	if err != nil {
		writeConnectUnaryError(w, *h.rpcError(r, k, err))
		return
	}
	writeUnary(w, struct{}{})
}
