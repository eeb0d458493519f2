// Package mcphost runs stdio MCP servers inside sandboxes as supervised
// processes and bridges each to streamable HTTP, so that MCP clients use
// an untrusted third-party server as if it were local while it runs
// behind the sandbox's boundary: its filesystem, egress policy and limits.
//
// A hosted server is one process started through the sandbox's streaming
// exec; the daemon is its only MCP client and offers its tools again to
// any number of HTTP clients (mcpserver.Proxy). When the process exits it
// is started again after a backoff that doubles from 500 ms to 30 s and
// resets once a run has lasted a minute; it stops for good when its
// sandbox is gone or it is deleted.
package mcphost

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/mcpserver"
	"github.com/agentbox/agentbox/internal/version"
)

// Backoff bounds between restarts.
const (
	minBackoff = 500 * time.Millisecond
	maxBackoff = 30 * time.Second
	stableRun  = time.Minute
	// initTimeout bounds a server's start: process up and initialize
	// answered (npx may unpack a package first).
	initTimeout = 2 * time.Minute
	stderrTail  = 4 << 10
	maxPerBox   = 16
)

var validName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// Manager holds the hosted servers of every sandbox.
type Manager struct {
	log *slog.Logger
	ctx context.Context // ends at Close; each server's run derives from it
	end context.CancelFunc

	mu      sync.Mutex
	servers map[string]map[string]*Hosted // sandbox id -> name -> server
}

// New returns an empty manager.
func New(log *slog.Logger) *Manager {
	ctx, cancel := context.WithCancel(context.Background())
	return &Manager{log: log, ctx: ctx, end: cancel, servers: map[string]map[string]*Hosted{}}
}

// Close stops every hosted server.
func (m *Manager) Close() { m.end() }

// Audit records a call to a hosted server's tool; req says who called.
type Audit func(ctx context.Context, req *mcp.CallToolRequest, c mcpserver.Call)

// Start starts req in sandbox id, acting through c (a client with the
// rights of the sandbox's owner), and returns at once: the server starts
// in the background (GET shows its state).
func (m *Manager) Start(id string, req api.StartMCPServerRequest, c *client.Client, audit Audit) (*api.MCPServer, error) {
	if !validName.MatchString(req.Name) {
		return nil, errdefs.Invalid("name must be 1-63 of a-z, 0-9, - and _, starting with a letter or digit, got %q", req.Name)
	}
	if len(req.Command) == 0 || req.Command[0] == "" {
		return nil, errdefs.Invalid("command is required: the stdio MCP server's argv, such as [\"npx\", \"@modelcontextprotocol/server-filesystem\", \"/data\"]")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	box := m.servers[id]
	if box == nil {
		box = map[string]*Hosted{}
		m.servers[id] = box
	}
	if _, ok := box[req.Name]; ok {
		return nil, errdefs.New(errdefs.ErrAlreadyExists, "sandbox %s already hosts an MCP server named %q; delete it first or choose another name", id, req.Name)
	}
	if len(box) >= maxPerBox {
		return nil, errdefs.Exhausted("sandbox %s hosts %d MCP servers, the most it may", id, maxPerBox)
	}
	ctx, cancel := context.WithCancel(m.ctx)
	h := &Hosted{id: id, req: req, c: c, cancel: cancel, done: make(chan struct{}), state: api.MCPServerStarting,
		log: m.log.With("sandbox", id, "mcp_server", req.Name)}
	h.proxy = mcpserver.NewProxy(&mcp.Implementation{Name: req.Name, Title: req.Name + " (in agentbox sandbox " + id + ")", Version: version.Version},
		"", req.Name, audit)
	h.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return h.proxy.Server },
		&mcp.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute, DisableLocalhostProtection: true})
	box[req.Name] = h
	go func() {
		defer close(h.done)
		h.run(ctx)
		m.mu.Lock()
		if m.servers[id][req.Name] == h {
			delete(m.servers[id], req.Name)
			if len(m.servers[id]) == 0 {
				delete(m.servers, id)
			}
		}
		m.mu.Unlock()
	}()
	info := h.Info()
	return &info, nil
}

// Get returns the server name of sandbox id.
func (m *Manager) Get(id, name string) (*Hosted, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.servers[id][name]
	if !ok {
		return nil, errdefs.NotFound("sandbox %s hosts no MCP server named %q; list them with GET /v1/sandboxes/%s/mcp-servers", id, name, id)
	}
	return h, nil
}

// List returns sandbox id's servers by name.
func (m *Manager) List(id string) []api.MCPServer {
	m.mu.Lock()
	var hs []*Hosted
	for _, h := range m.servers[id] {
		hs = append(hs, h)
	}
	m.mu.Unlock()
	out := []api.MCPServer{}
	for _, h := range hs {
		out = append(out, h.Info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// Stop stops server name of sandbox id and waits until its process is
// gone (its stream closed) or ctx ends.
func (m *Manager) Stop(ctx context.Context, id, name string) error {
	h, err := m.Get(id, name)
	if err != nil {
		return err
	}
	h.cancel()
	select {
	case <-h.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Hosted is one MCP server hosted in a sandbox.
type Hosted struct {
	id      string
	req     api.StartMCPServerRequest
	c       *client.Client
	log     *slog.Logger
	proxy   *mcpserver.Proxy
	handler http.Handler
	cancel  context.CancelFunc
	done    chan struct{}

	mu       sync.Mutex
	state    string
	restarts int
	started  *time.Time
	lastErr  string
	stderr   tail
}

// ServeHTTP serves the server's streamable HTTP endpoint.
func (h *Hosted) ServeHTTP(w http.ResponseWriter, r *http.Request) { h.handler.ServeHTTP(w, r) }

// Info describes the server now.
func (h *Hosted) Info() api.MCPServer {
	h.mu.Lock()
	defer h.mu.Unlock()
	tools := h.proxy.Tools()
	slices.Sort(tools)
	return api.MCPServer{
		Name: h.req.Name, SandboxID: h.id, Command: h.req.Command, Env: h.req.Env, Cwd: h.req.Cwd,
		State: h.state, Endpoint: Endpoint(h.id, h.req.Name), Tools: tools, Restarts: h.restarts,
		StartedAt: h.started, LastError: h.lastErr, Stderr: h.stderr.String(),
	}
}

// Endpoint is the path of a hosted server's streamable HTTP endpoint.
func Endpoint(id, name string) string { return "/v1/sandboxes/" + id + "/mcp-servers/" + name + "/mcp" }

func (h *Hosted) setState(state, lastErr string, started *time.Time) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state, h.started = state, started
	if lastErr != "" {
		h.lastErr = lastErr
	}
}

// run starts the server, again and again, until ctx ends or the sandbox
// is gone.
func (h *Hosted) run(ctx context.Context) {
	backoff := minBackoff
	for {
		began := time.Now()
		err := h.once(ctx)
		if ctx.Err() != nil {
			h.setState(api.MCPServerStopped, "deleted", nil)
			return
		}
		if _, gerr := h.c.GetSandbox(context.WithoutCancel(ctx), h.id); errors.Is(gerr, errdefs.ErrNotFound) {
			h.proxy.ClearUpstream("its sandbox is gone")
			h.setState(api.MCPServerStopped, "its sandbox is gone", nil)
			return
		}
		msg := "exited"
		if err != nil {
			msg = err.Error()
		}
		h.log.Warn("hosted MCP server stopped; restarting", "err", msg, "backoff", backoff)
		h.proxy.ClearUpstream("the server exited (" + msg + ") and is restarting")
		h.mu.Lock()
		h.restarts++
		h.mu.Unlock()
		h.setState(api.MCPServerRestarting, msg, nil)
		if time.Since(began) >= stableRun {
			backoff = minBackoff
		}
		select {
		case <-ctx.Done():
			h.setState(api.MCPServerStopped, "deleted", nil)
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// once runs the server's process until it exits, serving its tools.
func (h *Hosted) once(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	exited := make(chan error, 1)
	go func() {
		ev, err := h.c.ExecStream(ctx, h.id, api.ExecRequest{Cmd: h.req.Command, Env: h.req.Env, Cwd: h.req.Cwd}, inR, outW, &h.stderr)
		if err == nil {
			err = fmt.Errorf("the server's process %s", exitOf(ev))
		}
		outW.CloseWithError(io.EOF)
		inR.CloseWithError(err)
		exited <- err
	}()

	cl := mcp.NewClient(&mcp.Implementation{Name: "agentbox-host", Version: version.Version}, &mcp.ClientOptions{
		ToolListChangedHandler: func(ctx context.Context, _ *mcp.ToolListChangedRequest) {
			if err := h.proxy.Refresh(ctx); err != nil {
				h.log.Warn("refreshing hosted MCP server's tools", "err", err)
			}
		},
	})
	ictx, icancel := context.WithTimeout(ctx, initTimeout)
	cs, err := cl.Connect(ictx, &mcp.IOTransport{Reader: outR, Writer: inW}, nil)
	if err == nil {
		err = h.proxy.SetUpstream(ictx, cs)
	}
	icancel()
	if err != nil {
		cancel()
		perr := <-exited
		if cs != nil {
			cs.Close()
		}
		return fmt.Errorf("starting: %v (%v)", err, perr)
	}
	now := time.Now()
	h.setState(api.MCPServerRunning, "", &now)
	err = <-exited
	cs.Close()
	return err
}

// exitOf says how a process ended, from its exit event.
func exitOf(ev *api.ExecEvent) string {
	switch {
	case ev.Signal != "":
		return "was killed by " + ev.Signal
	case ev.ExitCode != nil:
		return fmt.Sprintf("exited with code %d", *ev.ExitCode)
	}
	return "exited"
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTail {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTail:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
