// Package guest is the guest agent's process engine and HTTP server: the
// part of PID 1 inside every sandbox that runs commands for the daemon.
// It speaks the guest protocol of internal/guest/proto (HTTP/1.1 over the
// sandbox's channel): /ping, buffered and streaming exec, and the /files
// routes of package files.
//
// Every exec runs in its own session and process group, with an
// environment built from scratch, a cwd checked against magic-link tricks,
// the requested user's uid, gid and groups, and (when the sandbox's
// cgroups are given) its own child cgroup, so that a timeout kills its
// whole process tree. The process-wide reaper (reaper.go) waits for every
// child, orphans included.
package guest

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"sync"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/code"
	"github.com/agentbox/agentbox/internal/guest/desktop"
	"github.com/agentbox/agentbox/internal/guest/files"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/reply"
)

// Config is the guest's configuration, from the sandbox's template.
type Config struct {
	// Env is the default environment of every exec, KEY=VALUE.
	Env []string
	// User is the default user of exec and files; "" is root.
	User string
	// Workdir is the default cwd of exec; "" is the user's home if it
	// exists, else /.
	Workdir string
	// Cgroups are the sandbox's own cgroup directories (one per v1
	// hierarchy in use, or the v2 one). Empty: no per-exec cgroups, and a
	// timeout kills only the exec's process group and session.
	Cgroups []CgroupDir
	Logger  *slog.Logger
	Version string
	// KeepaliveInterval is how long a streaming exec may stay silent
	// before a keepalive event; 0 is 10 s.
	KeepaliveInterval time.Duration
	// CPUs is how many CPUs the agent may run on (its affinity mask),
	// counted before a filter that answers sched_getaffinity was
	// installed (internal/guest/sysview); 0: the server asks the kernel.
	CPUs int
	// CPULimit is a fixed CPU count the execs' environment says when no
	// cgroup gives one (proto.BootSpec.CPULimit); 0: none.
	CPULimit int
}

// maxExecBody caps the body of a buffered exec request (its stdin is in
// it, base64-encoded).
const maxExecBody = 96 << 20

// Server serves the guest protocol.
type Server struct {
	cfg     Config
	log     *slog.Logger
	reaper  *reaper
	cgroups *cgroupSet  // nil without cgroups
	oom     *oomCounter // nil without a memory cgroup (oom.go)
	cpu     *cpuLimit   // nil without a CPU cgroup (cpus.go)
	// devNull is an fd of /dev/null, every exec's default stdin; -1 where
	// the root has none.
	devNull int
	// procFD says /proc/self/fd works, so children enter their verified
	// cwd by fd.
	procFD    bool
	keepalive time.Duration
	started   time.Time
	handler   http.Handler

	// procs, ptys: background processes and PTY sessions (processes.go,
	// pty.go).
	procs procTable
	ptys  ptyTable
	// code runs the code interpreter's kernels (code.go).
	code *code.Manager
	// desktop runs the X display for computer use (desktop.go).
	desktop *desktop.Manager

	// mu guards live and servers.
	mu      sync.Mutex
	live    map[*proc]struct{}
	servers []*http.Server
}

// NewServer makes a Server and starts the process-wide reaper. From here
// on the reaper waits for every child of the process: nothing else in it
// may wait for children (no os/exec). It also marks every inherited fd
// above 2 close-on-exec, so none can leak into an exec.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		reaper:    theReaper(),
		devNull:   -1,
		keepalive: cfg.KeepaliveInterval,
		started:   time.Now(),
		live:      make(map[*proc]struct{}),
	}
	if s.keepalive <= 0 {
		s.keepalive = 10 * time.Second
	}
	if len(cfg.Cgroups) > 0 {
		s.cgroups = newCgroupSet(cfg.Cgroups, s.log)
		s.oom = findOOMCounter(cfg.Cgroups)
		s.cpu = openCPULimit(cfg.Cgroups, cfg.CPUs)
	}
	if s.cpu == nil && cfg.CPULimit > 0 {
		s.cpu = fixedCPULimit(cfg.CPULimit, cfg.CPUs)
	}
	if err := unix.CloseRange(3, math.MaxUint32, unix.CLOSE_RANGE_CLOEXEC); err != nil {
		s.log.Warn("marking inherited fds close-on-exec", "err", err)
	}
	if fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		s.devNull = fd
	} else {
		s.log.Warn("no /dev/null: execs get an empty pipe as stdin", "err", err)
	}
	if _, err := os.Stat("/proc/self/fd"); err == nil {
		s.procFD = true
	} else {
		s.log.Warn("no /proc: execs enter their cwd by path", "err", err)
	}

	mux := http.NewServeMux()
	mux.HandleFunc(proto.Ping.Pattern(), s.handlePing)
	mux.HandleFunc(proto.Exec.Pattern(), s.handleExec)
	mux.HandleFunc(proto.ExecStream.Pattern(), s.handleExecStream)
	s.registerProcesses(mux)
	s.registerPTY(mux)
	mux.HandleFunc(proto.FileWatch.Pattern(), s.handleWatch)
	mux.HandleFunc(proto.Dial.Pattern(), s.handleDial)
	mux.HandleFunc(proto.SetEnv.Pattern(), s.handleSetEnv) // setenv.go
	files.Register(mux, files.Options{DefaultUser: cfg.User, Logger: s.log})
	s.code = code.NewManager(code.Options{Spawner: kernelSpawner{s}, Logger: s.log})
	s.code.Register(mux)
	s.desktop = desktop.NewManager(desktop.Options{Spawner: desktopSpawner{s}, Logger: s.log})
	s.desktop.Register(mux)
	s.handler = mux
	return s
}

// Handler returns the guest protocol's HTTP handler.
func (s *Server) Handler() http.Handler { return s.handler }

// CPUs is how many CPUs the sandbox's CPU limit allows (ceil of its
// CFS quota, read now), or 0 when it allows every CPU the agent may run
// on, or there is none.
func (s *Server) CPUs() int { return s.cpu.count() }

// Serve serves HTTP/1.1 on ln until Shutdown; it returns nil after
// Shutdown. Streaming exec reads its request body while writing its
// response (full duplex).
func (s *Server) Serve(ln net.Listener) error {
	var protos http.Protocols
	protos.SetHTTP1(true)
	srv := &http.Server{
		Handler:           s.handler,
		Protocols:         &protos,
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	err := srv.Serve(ln)
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// Shutdown stops serving: listeners close at once, requests in flight may
// finish until ctx is done; then every exec still running is killed with
// its tree, background processes left in exec cgroups are killed too, and
// the exec cgroups made ahead are removed.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	srvs := s.servers
	s.mu.Unlock()
	var errs []error
	for _, srv := range srvs {
		if err := srv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
			srv.Close()
		}
	}
	s.mu.Lock()
	live := make([]*proc, 0, len(s.live))
	for p := range s.live {
		live = append(live, p)
	}
	s.mu.Unlock()
	for _, p := range live {
		p.kill(s)
	}
	if s.cgroups != nil {
		s.cgroups.close()
	}
	return errors.Join(errs...)
}

func (s *Server) track(p *proc) {
	s.mu.Lock()
	s.live[p] = struct{}{}
	s.mu.Unlock()
}

func (s *Server) untrack(p *proc) {
	s.mu.Lock()
	delete(s.live, p)
	s.mu.Unlock()
}

func (s *Server) handlePing(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, proto.Info{
		Version:  s.cfg.Version,
		Protocol: proto.Version,
		Pid:      os.Getpid(),
		Uptime:   time.Since(s.started).Round(time.Millisecond).String(),
	})
}

func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	var req api.ExecRequest
	body := http.MaxBytesReader(w, r.Body, maxExecBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(&req); err != nil {
		s.writeError(w, badBody(err))
		return
	}
	// Read to the body's end: only then does the server watch the
	// connection and cancel the request's context if the client leaves.
	if _, err := io.Copy(io.Discard, body); err != nil {
		s.writeError(w, badBody(err))
		return
	}
	res, err := s.execBuffered(r.Context(), &req)
	if err != nil {
		s.writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// execBuffered runs req to completion and returns its collected output.
func (s *Server) execBuffered(ctx context.Context, req *api.ExecRequest) (*api.ExecResult, error) {
	sp, err := s.prepare(req, false)
	if err != nil {
		return nil, err
	}
	defer sp.close()
	var p *proc
	if sp.notFound == "" {
		if p, err = s.start(sp, stdinSource{data: req.Stdin}); err != nil {
			return nil, err
		}
	}
	if p == nil {
		return &api.ExecResult{Stderr: sp.notFound, ExitCode: sp.notFoundCode}, nil
	}
	sp.close()
	s.track(p)
	defer s.untrack(p)

	done := make(chan struct{}, 2)
	stdout := capture{max: sp.maxOut}
	stderr := capture{max: sp.maxOut}
	go stdout.readAll(p.stdout, done)
	go stderr.readAll(p.stderr, done)
	if p.stdin != nil {
		go func() { // ends when written, or when finish closes p.stdin
			p.stdin.Write(req.Stdin)
			p.stdin.Close()
		}()
	}

	var timeout <-chan time.Time
	if sp.timeout > 0 {
		t := time.NewTimer(sp.timeout)
		defer t.Stop()
		timeout = t.C
	}
	var (
		ws       syscall.WaitStatus
		timedOut bool
		ctxDone  = ctx.Done()
	)
wait:
	for {
		select {
		case ws = <-p.exited:
			break wait
		case <-timeout:
			timedOut, timeout = true, nil
			go p.kill(s)
		case <-ctxDone:
			ctxDone = nil // the client is gone: nobody wants the result
			go p.kill(s)
		}
	}
	dur := time.Since(p.started)
	waitReaders(done, 2, p.stdout, p.stderr)
	s.finish(p)

	res := &api.ExecResult{
		TimedOut:   timedOut,
		Truncated:  stdout.truncated || stderr.truncated,
		DurationMs: float64(dur.Microseconds()) / 1000,
	}
	res.ExitCode, res.Signal = exitStatus(ws)
	res.OOMKilled = s.oomKilled(p, ws)
	if utf8.Valid(stdout.buf) && utf8.Valid(stderr.buf) {
		res.Stdout, res.Stderr = string(stdout.buf), string(stderr.buf)
	} else {
		res.Encoding = "base64"
		res.Stdout = base64.StdEncoding.EncodeToString(stdout.buf)
		res.Stderr = base64.StdEncoding.EncodeToString(stderr.buf)
	}
	return res, nil
}

// capture collects one output stream up to max bytes (0: no cap) and
// drains the rest, so the process never blocks on a full pipe.
type capture struct {
	buf       []byte
	max       int64
	truncated bool
}

func (c *capture) readAll(f *os.File, done chan<- struct{}) {
	defer func() { done <- struct{}{} }()
	bp := getBuf()
	defer putBuf(bp)
	for {
		n, err := f.Read(*bp)
		if n > 0 {
			data := (*bp)[:n]
			if c.max > 0 && int64(len(c.buf))+int64(n) > c.max {
				data = data[:c.max-int64(len(c.buf))]
				c.truncated = true
			}
			c.buf = append(c.buf, data...)
		}
		if err != nil {
			return
		}
	}
}

// readBufSize is the size of one read from an output pipe, and of one
// streamed output event at most: the pipe's capacity, so that one read
// can empty it.
const readBufSize = outputPipeSize

// outputPipeSize is the capacity an exec's output pipes are given: with
// 64 KiB (the kernel's default) a stream of output moved 571-587 MB/s,
// with 256 KiB 706-845 (docs/PERFORMANCE.md, "The exec stream's
// throughput").
const outputPipeSize = 256 << 10

// Buffers have api.FrameHeaderLen bytes more, room for a frame's header
// before a read of readBufSize (pump).
var bufPool = sync.Pool{New: func() any { b := make([]byte, api.FrameHeaderLen+readBufSize); return &b }}

func getBuf() *[]byte  { return bufPool.Get().(*[]byte) }
func putBuf(b *[]byte) { bufPool.Put(b) }

// badBody classifies a request body that did not decode.
func badBody(err error) error {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		return errdefs.Invalid("exec request is larger than %d bytes; send big input through POST /exec/stream with stdin_stream, or upload it with /files", tooBig.Limit)
	}
	return errdefs.Invalid("exec request is not valid JSON (%v); send one ExecRequest object", err)
}

// writeJSON writes v as the answer (package reply, shared with the
// code and desktop routes).
var writeJSON = reply.JSON

// writeError answers err as an ErrorBody with the status of its class.
func (s *Server) writeError(w http.ResponseWriter, err error) {
	_, status := errdefs.Code(err)
	if status >= 500 {
		s.log.Error("exec failed", "err", err)
	}
	writeJSON(w, status, api.ErrorBody{Error: errorDetail(err)})
}

func errorDetail(err error) api.ErrorDetail {
	code, _ := errdefs.Code(err)
	return api.ErrorDetail{Code: code, Message: err.Error()}
}

// SetEnv replaces the default environment of every later exec. The gvisor
// tier calls it when a checkpoint is restored as another sandbox (a fork
// child, or a create from a template's checkpoint), while no listener
// serves, so no request reads the old one meanwhile.
func (s *Server) SetEnv(env []string) {
	s.mu.Lock()
	old := s.cfg.Env
	s.cfg.Env = env
	s.mu.Unlock()
	if s.code != nil {
		// A warm pool's kernel started before this env was known.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		s.code.UpdateEnv(ctx, old, env)
	}
}
