package e2b

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// PTYs (the SDK's pty.create, sendInput, resize, kill) on agentbox's PTY
// sessions: envd's Start with a pty creates one and streams its output
// as data.pty events while the call lasts; SendInput types into it through
// the same attachment, which the Handler keeps for that long.

type ptySize struct {
	Size struct {
		Cols int `json:"cols"`
		Rows int `json:"rows"`
	} `json:"size"`
}

// ptys are the attached PTYs of the Start calls in progress, by sandbox
// and pid.
type ptys struct {
	mu sync.Mutex
	m  map[string]*client.PTYConn
}

func ptyKey(id string, pid int) string { return id + "/" + strconv.Itoa(pid) }

func (p *ptys) put(key string, c *client.PTYConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]*client.PTYConn{}
	}
	p.m[key] = c
}

func (p *ptys) get(key string) *client.PTYConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.m[key]
}

func (p *ptys) drop(key string, c *client.PTYConn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m[key] == c {
		delete(p.m, key)
	}
}

// ptyStart serves a Start with a pty: the terminal's output, then the
// program's exit.
func (h *Handler) ptyStart(r *http.Request, s *stream, k *call, in *startRequest) {
	req := api.CreatePTYRequest{
		Cmd:  append([]string{in.Process.Cmd}, in.Process.Args...),
		Cols: in.Pty.Size.Cols, Rows: in.Pty.Size.Rows,
		Env: in.Process.Envs, User: k.user,
	}
	cwd, err := h.cwdOf(r, k, in.Process.Cwd)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	req.Cwd = cwd
	sess, err := k.c.CreatePTY(r.Context(), k.id, req)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	conn, err := k.c.AttachPTY(r.Context(), k.id, sess.Pid)
	if err != nil {
		s.end(h.rpcError(r, k, err))
		return
	}
	defer conn.Close()
	key := ptyKey(k.id, sess.Pid)
	h.ptys.put(key, conn)
	defer h.ptys.drop(key, conn)
	if s.send(eventMessage{processEvent{Start: &startEvent{Pid: uint32(sess.Pid)}}}) != nil {
		return
	}
	stop := make(chan struct{})
	done := s.keepalive(r, eventMessage{processEvent{Keepalive: &struct{}{}}}, stop)
	defer func() { close(stop); <-done }()
	buf := make([]byte, 32<<10)
	for {
		n, err := conn.Read(buf)
		if n > 0 {
			if s.send(eventMessage{processEvent{Data: &dataEvent{Pty: append([]byte(nil), buf[:n]...)}}}) != nil {
				return
			}
		}
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if r.Context().Err() == nil {
				s.end(&connectError{Code: "unavailable", Message: "reading the terminal: " + err.Error()})
			}
			return
		}
	}
	exit := &api.ExecEvent{ExitCode: conn.ExitCode()}
	if exit.ExitCode == nil {
		exit.Signal = "SIGKILL"
	}
	if s.send(eventMessage{processEvent{End: endOf(exit)}}) == nil {
		s.end(nil)
	}
}

// ptyInput types into a PTY attached by a Start call in progress.
func (h *Handler) ptyInput(k *call, ref string, data []byte) *connectError {
	pid, err := strconv.Atoi(ref)
	if err != nil {
		return &connectError{Code: "invalid_argument", Message: "a PTY is named by its pid"}
	}
	conn := h.ptys.get(ptyKey(k.id, pid))
	if conn == nil {
		return &connectError{Code: "not_found", Message: "no PTY with pid " + ref + " is attached (its pty.create call has ended)"}
	}
	if _, err := conn.Write(data); err != nil {
		return errorOf(errdefs.Unavailable("typing into PTY %d: %v", pid, err))
	}
	return nil
}

// processUpdate resizes a PTY.
func (h *Handler) processUpdate(w http.ResponseWriter, r *http.Request, k *call) {
	var in struct {
		Process processSelector `json:"process"`
		Pty     *ptySize        `json:"pty"`
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
	if in.Pty != nil {
		pid, err := strconv.Atoi(ref)
		if err == nil {
			err = k.c.ResizePTY(r.Context(), k.id, pid, in.Pty.Size.Cols, in.Pty.Size.Rows)
		}
		if err != nil {
			writeConnectUnaryError(w, *h.rpcError(r, k, err))
			return
		}
	}
	writeUnary(w, struct{}{})
}
