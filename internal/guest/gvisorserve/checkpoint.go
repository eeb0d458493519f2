package gvisorserve

// Checkpoint support of `serve` (the gvisor tier).
//
// runsc cannot save a sandbox that holds a host unix socket: the guest
// channel, which the agent listens on through --host-uds=create, makes
// `runsc checkpoint` fail with "Cannot save endpoint with bound host
// socket". So before a checkpoint the driver sends POST /checkpoint on the
// channel (proto.Checkpoint.Path): the agent answers, then closes the
// channel's listener and every connection on it (open exec streams end;
// the processes go on). To open it again, the driver checkpoints with
// --save-restore-exec-argv "/.agentbox/agentbox-guest hook": runsc keeps
// that in the sandbox's kernel (saved with it) and runs it inside the
// sandbox after a restore (GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE=restore) and
// when the saved sandbox goes on running (resume). The hook tells the agent
// over a control socket inside gVisor's kernel (an abstract unix socket,
// never a host one):
//
//   - restore: take the identity of the restored sandbox from the boot
//     spec runsc gives the hook (the restore bundle's environment: a fork
//     child or a create from a template checkpoint is another sandbox
//     than the one saved) and listen again on the channel;
//   - resume: listen again.
//
// Only the hook may talk to it (fromHook: its capability bounding set is
// full, every sandbox process's is empty), and both act only while the
// channel is closed. (runsc runs the hook before a save too, mode save: nothing
// to do then.)

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

const (
	// ctlAddr is the control socket (abstract: no file, not on the host).
	ctlAddr = "@agentbox-guest-ctl"
	// hookModeEnv is set by runsc for the save/restore hook.
	hookModeEnv = "GVISOR_SAVE_RESTORE_AUTO_EXEC_MODE"
	// pidsWorkload is the workload's cgroup in gVisor's pids hierarchy.
	pidsWorkload = "/.agentbox/cgroup/pids/workload"
)

// ctlRequest is one line on the control socket.
type ctlRequest struct {
	Mode string `json:"mode"`
	// Boot and Pids: the restored sandbox's identity (restore only).
	Boot *proto.BootSpec `json:"boot,omitempty"`
	Pids int64           `json:"pids,omitempty"`
}

// channel is the guest channel: a listener on a host socket path that a
// checkpoint closes and a restore opens again.
type channel struct {
	path string
	srv  *guest.Server
	base *slog.Logger // log without the sandbox's id
	log  *slog.Logger
	errc chan error

	mu    sync.Mutex
	ln    net.Listener // nil while closed for a checkpoint
	conns map[net.Conn]struct{}
}

// listenLocked opens the channel and serves it.
func (c *channel) listenLocked() error {
	_ = os.Remove(c.path)
	ln, err := net.Listen("unix", c.path)
	if err != nil {
		return fmt.Errorf("guest socket %s: %w", c.path, err)
	}
	tl := &trackedListener{Listener: ln, c: c}
	c.ln = tl
	mux := http.NewServeMux()
	mux.HandleFunc(proto.Checkpoint.Pattern(), c.handleCheckpoint)
	mux.Handle("/", c.srv.Handler())
	var protos http.Protocols
	protos.SetHTTP1(true)
	hs := &http.Server{
		Handler:           mux,
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(c.log.Handler(), slog.LevelWarn),
	}
	go func() {
		err := hs.Serve(tl)
		c.mu.Lock()
		ours := c.ln == tl
		c.mu.Unlock()
		if ours {
			// Not closed for a checkpoint: the agent cannot go on.
			if err == nil {
				err = errors.New("guest channel closed")
			}
			c.errc <- err
		}
	}()
	return nil
}

// handleCheckpoint answers, then closes the channel for a checkpoint.
func (c *channel) handleCheckpoint(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Connection", "close")
	w.WriteHeader(http.StatusNoContent)
	_ = http.NewResponseController(w).Flush()
	c.mu.Lock()
	c.closeLocked()
	c.mu.Unlock()
	c.log.Info("guest channel closed for a checkpoint")
}

// closeLocked closes the listener and every connection accepted on it.
func (c *channel) closeLocked() {
	if c.ln == nil {
		return
	}
	ln := c.ln
	c.ln = nil
	_ = ln.Close()
	for conn := range c.conns {
		// The inner conn: trackedConn.Close would take c.mu again.
		_ = conn.(*trackedConn).Conn.Close()
	}
	clear(c.conns)
}

type trackedListener struct {
	net.Listener
	c *channel
}

func (l *trackedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.c.mu.Lock()
	defer l.c.mu.Unlock()
	if l.c.ln != l {
		_ = conn.Close()
		return nil, net.ErrClosed
	}
	tc := &trackedConn{Conn: conn, c: l.c}
	l.c.conns[tc] = struct{}{}
	return tc, nil
}

type trackedConn struct {
	net.Conn
	c    *channel
	once sync.Once
}

func (t *trackedConn) Close() error {
	t.once.Do(func() {
		t.c.mu.Lock()
		delete(t.c.conns, t)
		t.c.mu.Unlock()
	})
	return t.Conn.Close()
}

// serveChannel serves the guest protocol on path, and the control socket,
// until the channel fails.
func serveChannel(srv *guest.Server, path string, log *slog.Logger, sandboxID string) error {
	c := &channel{path: path, srv: srv, base: log, log: log.With("sandbox", sandboxID), errc: make(chan error, 1), conns: map[net.Conn]struct{}{}}
	c.mu.Lock()
	err := c.listenLocked()
	c.mu.Unlock()
	if err != nil {
		return err
	}
	ctl, err := net.Listen("unix", ctlAddr)
	if err != nil {
		// Without it the sandbox cannot be checkpointed, but it serves.
		log.Warn("control socket: checkpoints will fail", "err", err)
	} else {
		go c.serveCtl(ctl)
	}
	return <-c.errc
}

func (c *channel) serveCtl(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		go func() {
			defer conn.Close()
			_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
			line, err := bufio.NewReader(io.LimitReader(conn, 1<<20)).ReadBytes('\n')
			if err != nil {
				return
			}
			if err := fromHook(conn); err != nil {
				c.log.Warn("control socket: refused a peer", "err", err)
				fmt.Fprintf(conn, "error: %v\n", err)
				return
			}
			var req ctlRequest
			if err := json.Unmarshal(line, &req); err != nil {
				fmt.Fprintf(conn, "error: %v\n", err)
				return
			}
			if err := c.handle(&req); err != nil {
				fmt.Fprintf(conn, "error: %v\n", err)
				return
			}
			fmt.Fprintln(conn, "ok")
		}()
	}
}

func (c *channel) handle(req *ctlRequest) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch req.Mode {
	case "save":
		return nil // the daemon closed the channel already
	case "restore", "resume":
		if c.ln != nil {
			return nil // serving already (a plain pause and resume)
		}
		if req.Mode == "restore" {
			c.assume(req)
		}
		if err := c.listenLocked(); err != nil {
			return err
		}
		c.log.Info("guest channel open again", "after", req.Mode)
		return nil
	}
	return fmt.Errorf("unknown mode %q", req.Mode)
}

// assume takes the restored sandbox's identity: its default env and pids
// limit (the hostname is runsc's: it sets the restore spec's).
func (c *channel) assume(req *ctlRequest) {
	if req.Boot != nil {
		c.srv.SetEnv(req.Boot.Env)
		c.log = c.base.With("sandbox", req.Boot.SandboxID)
	}
	if req.Pids > 0 {
		if err := os.WriteFile(filepath.Join(pidsWorkload, "pids.max"), []byte(strconv.FormatInt(req.Pids, 10)), 0); err != nil {
			c.log.Warn("restore: pids.max", "err", err)
		}
		// Lowering a limit needs no privilege; every later exec inherits it.
		n := uint64(req.Pids + nprocReserve)
		if err := unix.Setrlimit(unix.RLIMIT_NPROC, &unix.Rlimit{Cur: n, Max: n}); err != nil {
			c.log.Warn("restore: RLIMIT_NPROC", "err", err)
		}
	}
}

// nprocReserve matches the driver's: the agent's own share of root's
// RLIMIT_NPROC count.
const nprocReserve = 64

// Hook is `agentbox-guest hook`, run by runsc inside the sandbox around
// a checkpoint; it relays the mode (and, on restore, the restore spec's
// identity, from its environment) to the agent.
func Hook() error {
	req := ctlRequest{Mode: os.Getenv(hookModeEnv)}
	if req.Mode == "" {
		return fmt.Errorf("%s not set: `agentbox-guest hook` is run by runsc around a checkpoint", hookModeEnv)
	}
	if req.Mode == "restore" {
		var spec proto.BootSpec
		if err := json.Unmarshal([]byte(os.Getenv(proto.ServeSpecEnv)), &spec); err == nil {
			req.Boot = &spec
		}
		req.Pids, _ = strconv.ParseInt(os.Getenv(proto.ServePidsEnv), 10, 64)
	}
	conn, err := net.DialTimeout("unix", ctlAddr, 10*time.Second)
	if err != nil {
		return fmt.Errorf("agent control socket: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	b, _ := json.Marshal(&req)
	if _, err := conn.Write(append(b, '\n')); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return fmt.Errorf("agent control socket: %w", err)
	}
	if line != "ok\n" {
		return fmt.Errorf("agent: %s", line)
	}
	return nil
}

// fromHook checks that the peer of conn is runsc's hook: it runs with every
// capability in its bounding set, while every process of the sandbox
// starts with an empty one (harden.go) and can never raise it, so a
// peer whose bounding set holds CAP_SYS_ADMIN is the hook.
func fromHook(conn net.Conn) error {
	uc, ok := conn.(*net.UnixConn)
	if !ok {
		return errors.New("not a unix connection")
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return err
	}
	var cred *unix.Ucred
	cerr := raw.Control(func(fd uintptr) {
		cred, err = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	})
	if cerr != nil || err != nil || cred == nil {
		return fmt.Errorf("peer credentials: %v %v", cerr, err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", cred.Pid))
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			bnd, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			if err != nil {
				return err
			}
			if bnd&(1<<unix.CAP_SYS_ADMIN) == 0 {
				return fmt.Errorf("peer pid %d is not the checkpoint hook (no CAP_SYS_ADMIN in its bounding set)", cred.Pid)
			}
			return nil
		}
	}
	return fmt.Errorf("peer pid %d: no CapBnd", cred.Pid)
}
