// Package code is the guest agent's code interpreter: Jupyter kernels,
// one per context, driven directly over the kernel wire protocol
// (ZeroMQ, in pure Go) with no jupyter_server. See docs/interpreter.md.
package code

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"sync"
	"syscall"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Limits.
const (
	maxContexts = 16
	maxQueued   = 16
	// interruptGrace is how long a kernel has to go idle after an
	// interrupt before a timed-out run restarts it.
	interruptGrace = 5 * time.Second
	// replyGrace bounds the wait for execute_reply once iopub said idle.
	replyGrace = 2 * time.Second
)

// Options configure a Manager.
type Options struct {
	Spawner Spawner
	Logger  *slog.Logger
	// Root is where kernelspecs are looked for ("" is /; tests set it).
	Root string
	// SocketDir holds the kernels' socket directories; "" picks the first
	// of /dev/shm/agentbox-kernels, /run/agentbox-kernels and
	// $TMPDIR/.agentbox-kernels that can be made.
	SocketDir string
}

// Manager holds a sandbox's code contexts.
type Manager struct {
	sp   Spawner
	log  *slog.Logger
	root string

	// mu guards ctxs and base.
	mu   sync.Mutex
	ctxs map[string]*codeContext
	base string
}

// NewManager returns a Manager with no contexts.
func NewManager(o Options) *Manager {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	return &Manager{sp: o.Spawner, log: o.Logger, root: o.Root, base: o.SocketDir, ctxs: map[string]*codeContext{}}
}

// codeContext is one context: its settings and its current kernel.
type codeContext struct {
	id, lang string
	spec     kernelSpec
	cwd      string
	user     string
	env      map[string]string
	created  time.Time

	// run holds one token: a run (or restart) owns the kernel while it
	// holds it. queued counts waiters.
	run    chan struct{}
	queued chan struct{}

	// mu guards the fields below.
	mu       sync.Mutex
	k        *kernel
	starting bool
	busy     bool
	count    int
	restarts int
	kernels  int
	lastExit string
	removed  bool
	// died says the kernel ended on its own since the last run: the
	// next run reports restarted.
	died bool
}

// idPattern is compiled at its first use, not at the agent's start: every
// sandbox's agent starts, few run code (a package-level regexp cost each
// agent start about 0.1 ms of CPU, docs/PERFORMANCE.md).
var idPattern = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`) })

// socketBase returns the root-owned directory that holds each kernel's
// socket directory, making it on first use. /dev/shm comes first: it is a
// tmpfs on every tier, and on gvisor a socket bound there lives inside
// the sandbox's kernel, so a checkpoint (fork or snapshot with memory)
// can save it; one bound on the rootfs is a host socket, which cannot be.
func (m *Manager) socketBase() (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.base != "" {
		return m.base, nil
	}
	var errs []error
	for _, d := range []string{"/dev/shm/agentbox-kernels", "/run/agentbox-kernels", filepath.Join(os.TempDir(), ".agentbox-kernels")} {
		os.Mkdir(d, 0o711)
		fi, err := os.Lstat(d)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !fi.IsDir() || !ok || st.Uid != uint32(os.Geteuid()) {
			errs = append(errs, fmt.Errorf("%s is not a directory of the agent's own", d))
			continue
		}
		if err := os.Chmod(d, 0o711); err != nil {
			errs = append(errs, err)
			continue
		}
		m.base = d
		return d, nil
	}
	return "", fmt.Errorf("no directory for kernel sockets: %w", errors.Join(errs...))
}

// Create makes a context and starts its kernel.
func (m *Manager) Create(ctx context.Context, req api.CreateCodeContextRequest) (api.CodeContext, error) {
	lang := normalizeLanguage(req.Language)
	id := req.ID
	if id == "" {
		id = newID()[:12]
	} else if !idPattern().MatchString(id) {
		return api.CodeContext{}, errdefs.Invalid("context id must be 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit; got %q", id)
	}
	c, err := m.add(id, lang, req.Cwd, req.User, req.Env)
	if err != nil {
		return api.CodeContext{}, err
	}
	if err := m.startIn(ctx, c); err != nil {
		m.remove(c)
		return api.CodeContext{}, err
	}
	return c.info(), nil
}

// add registers a context without starting it.
func (m *Manager) add(id, lang, cwd, user string, env map[string]string) (*codeContext, error) {
	spec, err := findSpec(m.root, lang)
	if err != nil {
		return nil, err
	}
	for k := range env {
		if k == "" || containsAny(k, "=\x00") {
			return nil, errdefs.Invalid("env name %q is not valid; names are non-empty without '=' or NUL", k)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.ctxs[id]; ok {
		return nil, errdefs.New(errdefs.ErrAlreadyExists, "code context %q exists; pick another id or remove it first", id)
	}
	if len(m.ctxs) >= maxContexts {
		return nil, errdefs.Exhausted("this sandbox has %d code contexts, the most allowed; remove one first (each kernel holds ~70 MB)", maxContexts)
	}
	c := &codeContext{id: id, lang: lang, spec: spec, cwd: cwd, user: user, env: env, created: time.Now(),
		run: make(chan struct{}, 1), queued: make(chan struct{}, maxQueued)}
	c.run <- struct{}{}
	m.ctxs[id] = c
	return c, nil
}

func (m *Manager) remove(c *codeContext) {
	m.mu.Lock()
	if m.ctxs[c.id] == c {
		delete(m.ctxs, c.id)
	}
	m.mu.Unlock()
}

func containsAny(s, chars string) bool {
	for _, r := range chars {
		if slices.Contains([]rune(s), r) {
			return true
		}
	}
	return false
}

// get finds a context.
func (m *Manager) get(id string) (*codeContext, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.ctxs[id]
	if !ok {
		return nil, errdefs.NotFound("no code context %q; list them with GET /code/contexts or create one with POST /code/contexts", id)
	}
	return c, nil
}

// defaultFor returns the default context of lang (id = the language),
// registering it on first use.
func (m *Manager) defaultFor(lang string) (*codeContext, error) {
	lang = normalizeLanguage(lang)
	m.mu.Lock()
	c, ok := m.ctxs[lang]
	m.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := m.add(lang, lang, "", "", nil)
	if errors.Is(err, errdefs.ErrAlreadyExists) {
		return m.get(lang)
	}
	return c, err
}

// List returns every context, by creation.
func (m *Manager) List() []api.CodeContext {
	m.mu.Lock()
	cs := make([]*codeContext, 0, len(m.ctxs))
	for _, c := range m.ctxs {
		cs = append(cs, c)
	}
	m.mu.Unlock()
	sort.Slice(cs, func(i, j int) bool { return cs[i].created.Before(cs[j].created) })
	out := make([]api.CodeContext, len(cs))
	for i, c := range cs {
		out[i] = c.info()
	}
	return out
}

// Get returns one context.
func (m *Manager) Get(id string) (api.CodeContext, error) {
	c, err := m.get(id)
	if err != nil {
		return api.CodeContext{}, err
	}
	return c.info(), nil
}

// Delete shuts a context's kernel down and forgets it.
func (m *Manager) Delete(id string) error {
	c, err := m.get(id)
	if err != nil {
		return err
	}
	m.remove(c)
	c.mu.Lock()
	c.removed = true
	k := c.k
	c.k = nil
	c.mu.Unlock()
	if k != nil {
		k.shutdown(2 * time.Second)
	}
	return nil
}

// Interrupt interrupts the context's running cell and waits up to 5 s
// for the kernel to go idle.
func (m *Manager) Interrupt(ctx context.Context, id string) (api.CodeContext, error) {
	c, err := m.get(id)
	if err != nil {
		return api.CodeContext{}, err
	}
	c.mu.Lock()
	k, busy := c.k, c.busy
	c.mu.Unlock()
	if k == nil || k.dead() {
		return c.info(), nil
	}
	if err := k.interrupt(); err != nil {
		return api.CodeContext{}, errdefs.Unavailable("interrupting kernel: %v", err)
	}
	if busy {
		// The run that holds the kernel ends when it goes idle.
		t := time.NewTimer(interruptGrace)
		defer t.Stop()
		select {
		case <-c.run:
			c.run <- struct{}{}
		case <-t.C:
		case <-ctx.Done():
		}
	}
	return c.info(), nil
}

// Restart replaces the context's kernel with a fresh one (state lost). A
// run in flight ends with a ContextRestarting error.
func (m *Manager) Restart(ctx context.Context, id string) (api.CodeContext, error) {
	c, err := m.get(id)
	if err != nil {
		return api.CodeContext{}, err
	}
	c.mu.Lock()
	old := c.k
	c.k = nil
	c.mu.Unlock()
	if old != nil {
		old.shutdown(0) // a run holding it sees the kernel end
	}
	select {
	case <-c.run:
	case <-ctx.Done():
		return api.CodeContext{}, ctx.Err()
	}
	defer func() { c.run <- struct{}{} }()
	c.mu.Lock()
	if c.k != nil { // a run restarted it meanwhile
		c.mu.Unlock()
		return c.info(), nil
	}
	c.mu.Unlock()
	if err := m.startIn(ctx, c); err != nil {
		return api.CodeContext{}, err
	}
	return c.info(), nil
}

// startIn starts a kernel for c (whose run token the caller holds, or
// which no one else can see yet).
func (m *Manager) startIn(ctx context.Context, c *codeContext) error {
	base, err := m.socketBase()
	if err != nil {
		return errdefs.Unavailable("%v", err)
	}
	c.mu.Lock()
	c.starting = true
	c.mu.Unlock()
	k, err := startKernel(ctx, m.sp, c.spec, base, c.id, c.cwd, c.user, c.env)
	if err == nil {
		m.bootstrap(ctx, c, k)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.starting = false
	if err != nil {
		c.lastExit = err.Error()
		return errdefs.Unavailable("%v", err)
	}
	if c.removed {
		go k.shutdown(0)
		return errdefs.NotFound("code context %q was removed while its kernel started", c.id)
	}
	c.kernels++
	c.restarts = c.kernels - 1
	c.k = k
	c.count = 0
	return nil
}

// bootstrap runs a silent setup cell: plain tracebacks (no ANSI colour),
// whole sequences in text/plain.
func (m *Manager) bootstrap(ctx context.Context, c *codeContext, k *kernel) {
	if c.spec.Language != "python" {
		return
	}
	code := "get_ipython().run_line_magic('colors', 'NoColor')\n" +
		"get_ipython().display_formatter.formatters['text/plain'].max_seq_length = 0\n"
	if _, err := k.execSilent(ctx, code); err != nil {
		m.log.Warn("code context bootstrap", "context", c.id, "err", err)
	}
}

func (c *codeContext) info() api.CodeContext {
	c.mu.Lock()
	defer c.mu.Unlock()
	ci := api.CodeContext{ID: c.id, Language: c.lang, Kernel: c.spec.Name, Cwd: c.cwd, User: c.user,
		ExecutionCount: c.count, StartedAt: c.created.UTC(), Restarts: c.restarts, LastExit: c.lastExit}
	switch {
	case c.starting:
		ci.State = api.CodeStarting
	case c.k == nil || c.k.dead():
		ci.State = api.CodeDead
	case c.busy:
		ci.State = api.CodeBusy
	default:
		ci.State = api.CodeIdle
	}
	if c.k != nil && !c.k.dead() {
		ci.Pid = c.k.proc.Pid()
		ci.StartedAt = c.k.started.UTC()
	}
	return ci
}

// Close shuts every kernel down.
func (m *Manager) Close() {
	m.mu.Lock()
	cs := m.ctxs
	m.ctxs = map[string]*codeContext{}
	m.mu.Unlock()
	for _, c := range cs {
		c.mu.Lock()
		k := c.k
		c.k, c.removed = nil, true
		c.mu.Unlock()
		if k != nil {
			k.shutdown(0)
		}
	}
}
