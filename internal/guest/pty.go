package guest

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/coder/websocket"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// PTY sessions: a program on a new pseudo-terminal, as its session leader
// with the terminal as its controlling tty (so Ctrl-C, byte 0x03, reaches
// its foreground process group). The terminal's output goes into a ring
// of the last screenRing bytes, replayed to every client that attaches
// over the WebSocket, so a client can leave and come back.

// screenRing is how much recent terminal output is kept for reattach.
const screenRing = 64 << 10

// maxExitedPTYs bounds how many ended sessions stay listed.
const maxExitedPTYs = 64

type ptySession struct {
	p      *proc
	master *os.File // non-blocking, on the runtime's poller
	cmd    []string
	screen *ring
	done   chan struct{} // closed when the program ended and output is in

	// mu guards the fields below.
	mu         sync.Mutex
	cols, rows int
	exited     bool
	code       int
	signal     string
	ended      time.Time
}

func (ps *ptySession) info() api.PTYSession {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	in := api.PTYSession{ID: strconv.Itoa(ps.p.pid), Pid: ps.p.pid, Cmd: ps.cmd, Cols: ps.cols, Rows: ps.rows,
		State: api.ProcessRunning, StartedAt: ps.p.started.UTC()}
	if ps.exited {
		in.State, in.ExitCode, in.EndedAt = api.ProcessExited, new(ps.code), new(ps.ended.UTC())
	}
	return in
}

// resize sets the terminal's size; the kernel sends SIGWINCH to its
// foreground process group.
func (ps *ptySession) resize(cols, rows int) error {
	if err := checkSize(&cols, &rows); err != nil {
		return err
	}
	rc, err := ps.master.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := rc.Control(func(fd uintptr) {
		ierr = unix.IoctlSetWinsize(int(fd), unix.TIOCSWINSZ, &unix.Winsize{Row: uint16(rows), Col: uint16(cols)})
	}); err != nil {
		return errdefs.Precondition("the terminal of %d is closed", ps.p.pid)
	}
	if ierr != nil {
		return errdefs.Precondition("resizing the terminal of %d: %v", ps.p.pid, ierr)
	}
	ps.mu.Lock()
	ps.cols, ps.rows = cols, rows
	ps.mu.Unlock()
	return nil
}

func checkSize(cols, rows *int) error {
	if *cols == 0 {
		*cols = 80
	}
	if *rows == 0 {
		*rows = 24
	}
	if *cols < 1 || *cols > 4096 || *rows < 1 || *rows > 4096 {
		return errdefs.Invalid("cols and rows must be between 1 and 4096, got %dx%d", *cols, *rows)
	}
	return nil
}

// ptyTable holds the PTY sessions by pid.
type ptyTable struct {
	// mu guards m.
	mu sync.Mutex
	m  map[int]*ptySession
}

func (t *ptyTable) add(ps *ptySession) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.m == nil {
		t.m = make(map[int]*ptySession)
	}
	t.m[ps.p.pid] = ps
	var exited []*ptySession
	for _, o := range t.m {
		if o.info().State == api.ProcessExited {
			exited = append(exited, o)
		}
	}
	if len(exited) > maxExitedPTYs {
		slices.SortFunc(exited, func(a, b *ptySession) int { return a.p.started.Compare(b.p.started) })
		for _, o := range exited[:len(exited)-maxExitedPTYs] {
			delete(t.m, o.p.pid)
		}
	}
}

func (t *ptyTable) lookup(ref string) (*ptySession, error) {
	pid, err := strconv.Atoi(ref)
	t.mu.Lock()
	ps := t.m[pid]
	t.mu.Unlock()
	if err != nil || ps == nil {
		return nil, errdefs.NotFound("no PTY session %q; list them with GET /pty", ref)
	}
	return ps, nil
}

func (s *Server) registerPTY(mux *http.ServeMux) {
	mux.HandleFunc(proto.PTYCreate.Pattern(), s.handleCreatePTY)
	mux.HandleFunc(proto.PTYList.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		s.ptys.mu.Lock()
		all := slices.Collect(maps.Values(s.ptys.m))
		s.ptys.mu.Unlock()
		slices.SortFunc(all, func(a, b *ptySession) int { return a.p.started.Compare(b.p.started) })
		list := api.PTYList{Sessions: []api.PTYSession{}}
		for _, ps := range all {
			list.Sessions = append(list.Sessions, ps.info())
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc(proto.PTYSocket.Pattern(), s.withPTY(s.handlePTYSocket))
	mux.HandleFunc(proto.PTYResize.Pattern(), s.withPTY(func(w http.ResponseWriter, r *http.Request, ps *ptySession) {
		var sz api.PTYSize
		if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&sz); err != nil {
			s.writeError(w, errdefs.Invalid("resize request is not valid JSON (%v); send {\"cols\": 80, \"rows\": 24}", err))
			return
		}
		if err := ps.resize(sz.Cols, sz.Rows); err != nil {
			s.writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	mux.HandleFunc(proto.PTYKill.Pattern(), s.withPTY(func(w http.ResponseWriter, r *http.Request, ps *ptySession) {
		go ps.p.kill(s)
		select {
		case <-ps.done:
		case <-time.After(15 * time.Second):
			s.writeError(w, errdefs.Unavailable("PTY session %d did not end within 15 s of SIGKILL", ps.p.pid))
			return
		}
		s.ptys.mu.Lock()
		delete(s.ptys.m, ps.p.pid)
		s.ptys.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	}))
}

func (s *Server) withPTY(h func(http.ResponseWriter, *http.Request, *ptySession)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		ps, err := s.ptys.lookup(r.PathValue("pid"))
		if err != nil {
			s.writeError(w, err)
			return
		}
		h(w, r, ps)
	}
}

func (s *Server) handleCreatePTY(w http.ResponseWriter, r *http.Request) {
	var req api.CreatePTYRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20)).Decode(&req); err != nil {
		s.writeError(w, errdefs.Invalid("PTY request is not valid JSON (%v); send one CreatePTYRequest object", err))
		return
	}
	ps, err := s.startPTY(&req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, ps.info())
}

// loginShell is the user's shell from /etc/passwd when it exists and is
// a real shell, else /bin/sh.
func (s *Server) loginShell(name string) string {
	if name == "" {
		name = s.cfg.User
	}
	u, err := users.Lookup(name)
	if err != nil || u.Shell == "" {
		return "/bin/sh"
	}
	switch filepath.Base(u.Shell) {
	case "nologin", "false", "true", "sync":
		return "/bin/sh"
	}
	if st, err := os.Stat(u.Shell); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "/bin/sh"
	}
	return u.Shell
}

func (s *Server) startPTY(req *api.CreatePTYRequest) (*ptySession, error) {
	cols, rows := req.Cols, req.Rows
	if err := checkSize(&cols, &rows); err != nil {
		return nil, err
	}
	env := maps.Clone(req.Env)
	if env == nil {
		env = map[string]string{}
	}
	if _, ok := env["TERM"]; !ok {
		env["TERM"] = "xterm-256color"
	}
	ereq := &api.ExecRequest{Cmd: req.Cmd, Shell: req.Shell, Env: env, Cwd: req.Cwd, User: req.User}
	if len(req.Cmd) == 0 && req.Shell == "" {
		ereq.Cmd = []string{s.loginShell(req.User), "-l"}
	}
	sp, err := s.prepare(ereq, true)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	if sp.notFound != "" {
		return nil, errdefs.Invalid("%s", sp.notFound)
	}
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, errdefs.Unavailable("opening a pseudo-terminal: %v; the sandbox needs /dev/ptmx and /dev/pts", err)
	}
	defer tty.Close()
	// pty.Open leaves the master blocking (its Fd calls do that); a dup
	// made non-blocking goes on the poller, so reads can be cut.
	mfd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 3)
	ptmx.Close()
	if err != nil {
		return nil, errdefs.Unavailable("duplicating the terminal: %v", err)
	}
	if err := unix.SetNonblock(mfd, true); err != nil {
		unix.Close(mfd)
		return nil, errdefs.Unavailable("setting up the terminal: %v", err)
	}
	master := os.NewFile(uintptr(mfd), "ptmx")
	if err := pty.Setsize(tty, &pty.Winsize{Cols: uint16(cols), Rows: uint16(rows)}); err != nil {
		master.Close()
		return nil, errdefs.Unavailable("sizing the terminal: %v", err)
	}
	if sp.cred.Uid != 0 {
		_ = unix.Fchown(int(tty.Fd()), int(sp.cred.Uid), int(sp.cred.Gid))
	}
	fd := int(tty.Fd())
	p, err := s.startOn(sp, [3]int{fd, fd, fd}, true)
	if err != nil {
		master.Close()
		return nil, err
	}
	tty.Close() // only the child holds the terminal now: its end is our EIO
	s.track(p)
	ps := &ptySession{p: p, master: master, cmd: ereq.Cmd, screen: newRing(screenRing), done: make(chan struct{}), cols: cols, rows: rows}
	if ereq.Shell != "" {
		ps.cmd = []string{"/bin/sh", "-c", ereq.Shell}
	}
	s.ptys.add(ps)
	go s.supervisePTY(ps)
	return ps, nil
}

// supervisePTY copies terminal output into the screen ring and records the
// end. Background processes that keep the terminal open past the main
// program's end are cut off after outputGrace.
func (s *Server) supervisePTY(ps *ptySession) {
	defer s.untrack(ps.p)
	readers := make(chan struct{}, 1)
	go drainInto(ps.master, ps.screen, readers)
	ws := <-ps.p.exited
	waitReaders(readers, 1, ps.master)
	s.finish(ps.p) // closes nothing of ours but the cgroup: stdout etc. are nil
	ps.master.Close()
	ps.mu.Lock()
	ps.exited = true
	ps.code, ps.signal = exitStatus(ws)
	ps.ended = time.Now()
	ps.mu.Unlock()
	ps.screen.close()
	close(ps.done)
}

// handlePTYSocket attaches a WebSocket client: first the screen's recent
// output, then live output as binary frames, and the exit as a text
// frame; binary frames from the client are typed into the terminal and
// text frames are PTYControl messages (resize).
func (s *Server) handlePTYSocket(w http.ResponseWriter, r *http.Request, ps *ptySession) {
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{
		// Same-origin checks belong to browsers; the daemon authenticated
		// this request before forwarding it.
		InsecureSkipVerify: true,
	})
	if err != nil {
		return // Accept answered the client
	}
	c.SetReadLimit(1 << 20)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	writerDone := make(chan struct{})
	go func() {
		defer close(writerDone)
		defer cancel()
		var off int64
		for {
			data, next, _, eof, changed := ps.screen.readFrom(off, readBufSize)
			off = next
			if len(data) > 0 {
				if c.Write(ctx, websocket.MessageBinary, data) != nil {
					return
				}
				continue
			}
			if eof {
				in := ps.info()
				msg, _ := json.Marshal(api.PTYControl{Type: api.PTYExit, ExitCode: in.ExitCode, Signal: ps.exitSignal()})
				if c.Write(ctx, websocket.MessageText, msg) == nil {
					c.Close(websocket.StatusNormalClosure, "program exited")
				}
				return
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	for {
		typ, data, err := c.Read(ctx)
		if err != nil {
			break
		}
		if typ == websocket.MessageBinary {
			if _, err := ps.master.Write(data); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, syscall.EIO) {
				s.log.Debug("writing to terminal", "pid", ps.p.pid, "err", err)
			}
			continue
		}
		var ctl api.PTYControl
		if json.Unmarshal(data, &ctl) != nil || ctl.Type != api.PTYResize {
			continue // unknown control messages are ignored, for later versions
		}
		if err := ps.resize(ctl.Cols, ctl.Rows); err != nil {
			s.log.Debug("resizing terminal", "pid", ps.p.pid, "err", err)
		}
	}
	cancel()
	<-writerDone
	c.CloseNow()
}

func (ps *ptySession) exitSignal() string {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.signal
}
