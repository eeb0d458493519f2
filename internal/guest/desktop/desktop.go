// Package desktop is the guest agent's desktop for computer-use agents:
// it runs an X display in the sandbox (Xvfb, the openbox window manager
// and x11vnc, as tagged background processes of the agent), keeps one X
// connection to it (github.com/jezek/xgb, pure Go) for screenshots
// (MIT-SHM) and input (XTEST) without spawning a process per action, and
// serves the live view (noVNC's files and a byte relay to x11vnc's
// WebSocket) on the sandbox's loopback port api.DesktopStreamPort.
package desktop

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Spawner starts the desktop's processes: the guest agent owns every
// child (its reaper waits for them), so the Manager never forks.
type Spawner interface {
	// Spawn starts argv as a background process of the sandbox as its
	// default user, with env added to the sandbox's default environment.
	Spawn(s SpawnSpec) (Proc, error)
	// UserIDs resolves the sandbox's default user.
	UserIDs() (uid, gid int, err error)
}

// SpawnSpec is a process to start.
type SpawnSpec struct {
	Argv []string
	Env  map[string]string
	Cwd  string
	Tag  string
}

// Proc is a started process.
type Proc interface {
	Pid() int
	// Done closes when the process has ended.
	Done() <-chan struct{}
	// ExitReason says how it ended, with the tail of its stderr; valid
	// after Done.
	ExitReason() string
	// Terminate asks the process and everything it started to end
	// (SIGTERM), so that they release what outlives a killed process:
	// x11vnc's System V shared memory segments stay in the sandbox's
	// IPC namespace when it is SIGKILLed, until shmget fails.
	Terminate()
	// Kill kills the process and everything it started.
	Kill()
	// Info is the process as GET /processes shows it.
	Info() api.Process
}

// Options configure a Manager.
type Options struct {
	Spawner Spawner
	Logger  *slog.Logger
	// Display is the X display number (default 0).
	Display int
	// Dir holds the display's Xauthority and VNC password files (default
	// /tmp/.agentbox-desktop; created 0700, owned by the sandbox's user).
	Dir string
	// VNCPort is x11vnc's port on the loopback (default 5900); StreamPort
	// the live view's (default api.DesktopStreamPort); -1: no live view.
	VNCPort    int
	StreamPort int
	// NoVNCDir holds noVNC's static files (default /usr/share/novnc).
	NoVNCDir string
	// StartTimeout bounds a start (default 60 s).
	StartTimeout time.Duration
}

// Tags of the desktop's processes in GET /processes.
const (
	TagX   = "desktop-x"
	TagWM  = "desktop-wm"
	TagVNC = "desktop-vnc"
)

// Manager runs one desktop.
type Manager struct {
	opt Options
	log *slog.Logger

	// startMu serializes Start and Stop.
	startMu sync.Mutex

	// mu guards the fields below.
	mu      sync.Mutex
	state   string
	errMsg  string
	width   int
	height  int
	dpi     int
	started *time.Time
	procs   map[string]Proc
	x       *xconn
	stream  *streamServer
	cookie  []byte
	// vncPass and viewPass are x11vnc's interactive and view-only
	// passwords (8 characters: the VNC limit).
	vncPass, viewPass string
	// stop closes when the running desktop is stopped (ends supervision).
	stop chan struct{}
	// apps counts launched programs (their tags), launched holds them:
	// Stop ends them with the display.
	apps     int
	launched []Proc
}

// NewManager makes a Manager; nothing runs until Start.
func NewManager(opt Options) *Manager {
	if opt.Logger == nil {
		opt.Logger = slog.New(slog.DiscardHandler)
	}
	if opt.Dir == "" {
		opt.Dir = "/tmp/.agentbox-desktop"
	}
	if opt.VNCPort == 0 {
		opt.VNCPort = 5900
	}
	if opt.StreamPort == 0 {
		opt.StreamPort = api.DesktopStreamPort
	}
	if opt.NoVNCDir == "" {
		opt.NoVNCDir = "/usr/share/novnc"
	}
	if opt.StartTimeout <= 0 {
		opt.StartTimeout = 60 * time.Second
	}
	return &Manager{opt: opt, log: opt.Logger, state: api.DesktopStopped}
}

// DisplayName is the DISPLAY value of the desktop, ":0".
func (m *Manager) DisplayName() string { return ":" + strconv.Itoa(m.opt.Display) }

// Env is what a program on the display needs in its environment.
func (m *Manager) Env() map[string]string {
	return map[string]string{"DISPLAY": m.DisplayName(), "XAUTHORITY": m.xauthPath()}
}

func (m *Manager) xauthPath() string { return filepath.Join(m.opt.Dir, "Xauthority") }

// Get returns the desktop's state.
func (m *Manager) Get() api.Desktop {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.infoLocked()
}

func (m *Manager) infoLocked() api.Desktop {
	d := api.Desktop{State: m.state, Error: m.errMsg}
	if m.state == api.DesktopStopped {
		return d
	}
	d.Display = m.DisplayName()
	d.Width, d.Height, d.DPI = m.width, m.height, m.dpi
	d.StartedAt = m.started
	if m.opt.StreamPort > 0 {
		d.StreamPort = m.opt.StreamPort
	}
	if len(m.procs) > 0 {
		d.Processes = map[string]int{}
		for name, p := range m.procs {
			d.Processes[name] = p.Pid()
		}
	}
	if m.state == api.DesktopRunning {
		d.VNCPassword, d.VNCViewPassword = m.vncPass, m.viewPass
	}
	return d
}

// Start starts the display and returns once it is ready: the agent's X
// connection works, the window manager manages the screen and x11vnc
// accepts. A running desktop of the same size
// is left as it is; another size is a conflict.
func (m *Manager) Start(ctx context.Context, req api.StartDesktopRequest) (api.Desktop, error) {
	if req.Width == 0 {
		req.Width = api.DesktopDefaultWidth
	}
	if req.Height == 0 {
		req.Height = api.DesktopDefaultHeight
	}
	if req.DPI == 0 {
		req.DPI = api.DesktopDefaultDPI
	}
	if req.Width < 16 || req.Height < 16 || req.Width > api.DesktopMaxSide || req.Height > api.DesktopMaxSide {
		return api.Desktop{}, errdefs.Invalid("width and height must be between 16 and %d, got %dx%d", api.DesktopMaxSide, req.Width, req.Height)
	}
	if req.DPI < 24 || req.DPI > 960 {
		return api.Desktop{}, errdefs.Invalid("dpi must be between 24 and 960, got %d", req.DPI)
	}
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	if m.state == api.DesktopRunning {
		d := m.infoLocked()
		m.mu.Unlock()
		if d.Width != req.Width || d.Height != req.Height || d.DPI != req.DPI {
			return api.Desktop{}, errdefs.New(errdefs.ErrAlreadyExists, "the desktop is running at %dx%d, %d dpi; stop it (DELETE /desktop) to start it at another size", d.Width, d.Height, d.DPI)
		}
		return d, nil
	}
	m.state, m.errMsg = api.DesktopStarting, ""
	m.width, m.height, m.dpi = req.Width, req.Height, req.DPI
	m.procs = map[string]Proc{}
	m.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, m.opt.StartTimeout)
	defer cancel()
	err := m.start(ctx)
	m.mu.Lock()
	defer m.mu.Unlock()
	if err != nil {
		m.teardownLocked()
		m.state, m.errMsg = api.DesktopFailed, err.Error()
		if errors.Is(err, context.DeadlineExceeded) {
			return m.infoLocked(), errdefs.Unavailable("the desktop did not start within %s: %v", m.opt.StartTimeout, err)
		}
		return m.infoLocked(), err
	}
	now := time.Now().UTC()
	m.started = &now
	m.state = api.DesktopRunning
	return m.infoLocked(), nil
}

func randomString(n int) string {
	const alphabet = "abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789"
	b := make([]byte, n)
	rand.Read(b)
	for i := range b {
		b[i] = alphabet[int(b[i])%len(alphabet)]
	}
	return string(b)
}

func (m *Manager) start(ctx context.Context) error {
	uid, gid, err := m.opt.Spawner.UserIDs()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(m.opt.Dir, 0o700); err != nil {
		return fmt.Errorf("making %s: %w", m.opt.Dir, err)
	}
	os.Chmod(m.opt.Dir, 0o700)
	cookie := make([]byte, 16)
	rand.Read(cookie)
	if err := writeXauthority(m.xauthPath(), m.opt.Display, cookie); err != nil {
		return err
	}
	vnc, view := randomString(8), randomString(8)
	pwFile := filepath.Join(m.opt.Dir, "vncpasswd")
	if err := os.WriteFile(pwFile, []byte(vnc+"\n__BEGIN_VIEWONLY__\n"+view+"\n"), 0o600); err != nil {
		return err
	}
	for _, p := range []string{m.opt.Dir, m.xauthPath(), pwFile} {
		os.Lchown(p, uid, gid)
	}
	m.mu.Lock()
	m.cookie, m.vncPass, m.viewPass = cookie, vnc, view
	m.stop = make(chan struct{})
	w, h, dpi := m.width, m.height, m.dpi
	m.mu.Unlock()

	// A display left over from before (its lock file names a dead
	// server) would stop Xvfb.
	os.Remove(fmt.Sprintf("/tmp/.X%d-lock", m.opt.Display))
	xp, err := m.spawn("x", TagX, []string{"Xvfb", m.DisplayName(), "-screen", "0", fmt.Sprintf("%dx%dx24", w, h), "-dpi", strconv.Itoa(dpi), "-nolisten", "tcp", "-auth", m.xauthPath()})
	if err != nil {
		return err
	}
	x, err := m.connect(ctx, xp, cookie)
	if err != nil {
		return err
	}
	if err := x.initSHM(uid); err != nil {
		m.log.Info("desktop: screenshots without MIT-SHM", "err", err)
	}
	m.mu.Lock()
	m.x = x
	m.mu.Unlock()
	wm, err := m.spawn("wm", TagWM, m.wmArgv())
	if err != nil {
		return err
	}
	if err := x.waitWM(ctx, wm); err != nil {
		return err
	}
	vp, err := m.spawn("vnc", TagVNC, m.vncArgv())
	if err != nil {
		return err
	}
	if err := waitPort(ctx, m.opt.VNCPort, vp); err != nil {
		return err
	}
	if m.opt.StreamPort > 0 {
		s, err := newStreamServer(m.opt.StreamPort, m.opt.VNCPort, m.opt.NoVNCDir, m.log)
		if err != nil {
			return err
		}
		m.mu.Lock()
		m.stream = s
		m.mu.Unlock()
	}
	go m.supervise(m.stop)
	return nil
}

func (m *Manager) wmArgv() []string { return []string{"openbox"} }

func (m *Manager) vncArgv() []string {
	return []string{"x11vnc", "-display", m.DisplayName(), "-auth", m.xauthPath(),
		"-localhost", "-rfbport", strconv.Itoa(m.opt.VNCPort), "-forever", "-shared",
		"-passwdfile", filepath.Join(m.opt.Dir, "vncpasswd"), "-quiet"}
}

// spawn starts a piece of the desktop and records it under name.
func (m *Manager) spawn(name, tag string, argv []string) (Proc, error) {
	env := m.Env()
	p, err := m.opt.Spawner.Spawn(SpawnSpec{Argv: argv, Env: env, Tag: tag})
	if err != nil {
		return nil, fmt.Errorf("starting %s: %w", argv[0], err)
	}
	m.mu.Lock()
	m.procs[name] = p
	m.mu.Unlock()
	return p, nil
}

// connect dials the display until it answers, or the X server ends.
func (m *Manager) connect(ctx context.Context, xp Proc, cookie []byte) (*xconn, error) {
	var last error
	for delay := 10 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		x, err := dialX(m.opt.Display, cookie)
		if err == nil {
			return x, nil
		}
		last = err
		select {
		case <-xp.Done():
			return nil, fmt.Errorf("Xvfb ended: %s", xp.ExitReason())
		case <-ctx.Done():
			return nil, fmt.Errorf("connecting to the X server: %w (last: %v)", ctx.Err(), last)
		case <-time.After(delay):
		}
	}
}

// waitWM waits until the window manager manages the screen: EWMH's
// check (the root's _NET_SUPPORTING_WM_CHECK names a window that names
// itself), which openbox sets once it has selected SubstructureRedirect
// on the root. A program that maps its window before that is adopted
// when the window manager starts, but not focused: Start returning
// earlier let a launch right after it lose the focus.
func (x *xconn) waitWM(ctx context.Context, wm Proc) error {
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		if c, err := x.windowsProp(x.root, "_NET_SUPPORTING_WM_CHECK"); err == nil && len(c) == 1 {
			if self, err := x.windowsProp(c[0], "_NET_SUPPORTING_WM_CHECK"); err == nil && len(self) == 1 && self[0] == c[0] {
				return nil
			}
		}
		select {
		case <-wm.Done():
			return fmt.Errorf("the window manager (openbox) ended: %s", wm.ExitReason())
		case <-ctx.Done():
			return fmt.Errorf("waiting for the window manager (openbox) to manage the screen: %w", ctx.Err())
		case <-time.After(delay):
		}
	}
}

// waitPort waits until 127.0.0.1:port accepts, or p ends.
func waitPort(ctx context.Context, port int, p Proc) error {
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	for delay := 10 * time.Millisecond; ; delay = min(delay*2, 200*time.Millisecond) {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-p.Done():
			return fmt.Errorf("x11vnc ended: %s", p.ExitReason())
		case <-ctx.Done():
			return fmt.Errorf("waiting for x11vnc on port %d: %w", port, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// supervise restarts a crashed window manager or x11vnc; the X server
// ending fails the desktop.
func (m *Manager) supervise(stop chan struct{}) {
	for {
		m.mu.Lock()
		xp, wm, vnc := m.procs["x"], m.procs["wm"], m.procs["vnc"]
		m.mu.Unlock()
		if xp == nil || wm == nil || vnc == nil {
			return
		}
		select {
		case <-stop:
			return
		case <-xp.Done():
			m.mu.Lock()
			if m.stop == stop {
				m.log.Warn("desktop: the X server ended", "why", xp.ExitReason())
				m.teardownLocked()
				m.state, m.errMsg = api.DesktopFailed, "the X server (Xvfb) ended: "+xp.ExitReason()
			}
			m.mu.Unlock()
			return
		case <-wm.Done():
			m.restart(stop, "wm", TagWM, m.wmArgv(), wm)
		case <-vnc.Done():
			m.restart(stop, "vnc", TagVNC, m.vncArgv(), vnc)
		}
	}
}

func (m *Manager) restart(stop chan struct{}, name, tag string, argv []string, old Proc) {
	m.log.Warn("desktop: restarting "+argv[0], "why", old.ExitReason())
	// Not in a tight loop: a program that cannot start waits a little.
	select {
	case <-stop:
		return
	case <-time.After(200 * time.Millisecond):
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stop != stop {
		return
	}
	p, err := m.opt.Spawner.Spawn(SpawnSpec{Argv: argv, Env: m.Env(), Tag: tag})
	if err != nil {
		m.log.Warn("desktop: restarting "+argv[0], "err", err)
		return
	}
	m.procs[name] = p
}

// Stop stops the desktop's processes (and the programs launched on it)
// and closes the live view.
func (m *Manager) Stop() error {
	m.startMu.Lock()
	defer m.startMu.Unlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.teardownLocked()
	m.state, m.errMsg = api.DesktopStopped, ""
	return nil
}

// termGrace is how long the desktop's processes get to end after
// SIGTERM before they are killed.
const termGrace = 3 * time.Second

// teardownLocked ends everything the desktop runs.
func (m *Manager) teardownLocked() {
	if m.stop != nil {
		close(m.stop)
		m.stop = nil
	}
	if m.stream != nil {
		m.stream.close()
		m.stream = nil
	}
	if m.x != nil {
		m.x.close()
		m.x = nil
	}
	all := append(slices.Collect(maps.Values(m.procs)), m.launched...)
	// SIGTERM first, SIGKILL to what is left after termGrace.
	for _, p := range all {
		p.Terminate()
	}
	waitAll(all, termGrace)
	for _, p := range all {
		p.Kill()
	}
	// Wait for them to end: their tags are free again for a new start.
	waitAll(all, 10*time.Second)
	m.procs, m.launched = nil, nil
	m.started = nil
	os.Remove(filepath.Join(m.opt.Dir, "vncpasswd"))
}

// waitAll waits until every one of procs has ended or limit has passed.
// (One timer for all: a time.After channel delivers once, so a second
// process still running after it fired would be waited for forever.)
func waitAll(procs []Proc, limit time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	for _, p := range procs {
		select {
		case <-p.Done():
		case <-ctx.Done():
			return
		}
	}
}

// conn returns the running desktop's X connection.
func (m *Manager) conn() (*xconn, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.state != api.DesktopRunning || m.x == nil {
		msg := "the desktop is " + m.state
		if m.errMsg != "" {
			msg += " (" + m.errMsg + ")"
		}
		return nil, errdefs.Precondition("%s; start it with POST /desktop", msg)
	}
	return m.x, nil
}

// Actions runs a batch of actions and, when asked, takes a screenshot
// after the last one.
func (m *Manager) Actions(ctx context.Context, req api.DesktopActionsRequest) (api.DesktopActionsResult, error) {
	x, err := m.conn()
	if err != nil {
		return api.DesktopActionsResult{}, err
	}
	if len(req.Actions) > 10000 {
		return api.DesktopActionsResult{}, errdefs.Invalid("at most 10000 actions a batch, got %d", len(req.Actions))
	}
	var opt *shotOptions
	if req.Screenshot != nil {
		o, err := parseShotOptions(*req.Screenshot, x.width, x.height)
		if err != nil {
			return api.DesktopActionsResult{}, err
		}
		opt = &o
	}
	cur, err := x.run(ctx, req.Actions)
	if err != nil {
		return api.DesktopActionsResult{}, err
	}
	res := api.DesktopActionsResult{Cursor: cur}
	if opt != nil {
		var buf bytesBuffer
		iw, ih, err := x.screenshot(&buf, *opt, nil)
		if err != nil {
			return api.DesktopActionsResult{}, err
		}
		res.Screenshot = &api.ScreenshotData{Format: opt.format, Width: iw, Height: ih, Data: buf.Bytes()}
	}
	return res, nil
}

// Cursor returns the pointer's position.
func (m *Manager) Cursor() (api.Point, error) {
	x, err := m.conn()
	if err != nil {
		return api.Point{}, err
	}
	return x.cursor()
}

// Launch starts a program on the display as a background process.
func (m *Manager) Launch(req api.DesktopLaunchRequest) (api.Process, error) {
	if _, err := m.conn(); err != nil {
		return api.Process{}, err
	}
	argv := req.Cmd
	switch {
	case req.App != "" && len(req.Cmd) > 0:
		return api.Process{}, errdefs.Invalid("give app or cmd, not both")
	case req.App != "":
		a, ok := apps[req.App]
		if !ok {
			return api.Process{}, errdefs.Invalid("unknown app %q: want chromium or terminal, or give cmd", req.App)
		}
		argv = a
	case len(req.Cmd) == 0:
		return api.Process{}, errdefs.Invalid("give app (chromium, terminal) or cmd")
	}
	return m.launch(argv, req.Env, req.Cwd)
}

// Open opens url in Chromium.
func (m *Manager) Open(req api.DesktopOpenRequest) (api.Process, error) {
	if req.URL == "" {
		return api.Process{}, errdefs.Invalid("url is empty")
	}
	if _, err := m.conn(); err != nil {
		return api.Process{}, err
	}
	return m.launch(append(append([]string{}, apps["chromium"]...), req.URL), nil, "")
}

// apps are the programs Launch knows by name.
var apps = map[string][]string{
	"chromium": {"chromium", "--no-sandbox", "--no-first-run", "--disable-dev-shm-usage", "--password-store=basic", "--disable-gpu"},
	// st, not xterm: xterm run as root calls initgroups(), which needs
	// CAP_SETGID, and no sandbox process has it (xterm exits at once).
	"terminal": {"st"},
}

func (m *Manager) launch(argv []string, env map[string]string, cwd string) (api.Process, error) {
	e := m.Env()
	for k, v := range env {
		e[k] = v
	}
	m.mu.Lock()
	m.apps++
	tag := "desktop-app-" + strconv.Itoa(m.apps)
	m.mu.Unlock()
	p, err := m.opt.Spawner.Spawn(SpawnSpec{Argv: argv, Env: e, Cwd: cwd, Tag: tag})
	if err != nil {
		return api.Process{}, err
	}
	m.mu.Lock()
	m.launched = append(m.launched, p)
	m.mu.Unlock()
	return p.Info(), nil
}
