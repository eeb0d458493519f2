package desktop

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// execSpawner runs the desktop's processes with os/exec: the tests run
// outside the agent (no reaper), on the host's Xvfb, openbox and x11vnc
// (scripts/install-test-deps.sh installs them).
type execSpawner struct{}

func (execSpawner) UserIDs() (int, int, error) { return os.Getuid(), os.Getgid(), nil }

func (execSpawner) Spawn(sp SpawnSpec) (Proc, error) {
	cmd := exec.Command(sp.Argv[0], sp.Argv[1:]...)
	cmd.Env = os.Environ()
	for k, v := range sp.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = sp.Cwd
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	p := &execProc{cmd: cmd, done: make(chan struct{}), tag: sp.Tag}
	cmd.Stderr = &p.stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

type execProc struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	tag    string
	stderr lockedBuffer
}

func (p *execProc) Pid() int              { return p.cmd.Process.Pid }
func (p *execProc) Done() <-chan struct{} { return p.done }
func (p *execProc) ExitReason() string {
	return fmt.Sprintf("%v; stderr: %s", p.err, p.stderr.String())
}

// Terminate and Kill signal the process group. The Manager terminates
// first: x11vnc removes its SysV shared memory segments only when it
// exits of its own accord, and these run in the host's IPC namespace,
// where killed ones' segments stayed until the host's limit (4,096) was
// reached and every x11vnc failed ("shmget: No space left on device").
func (p *execProc) Terminate() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM) }
func (p *execProc) Kill()      { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }
func (p *execProc) Info() api.Process {
	return api.Process{Pid: p.Pid(), Tag: p.tag, Cmd: p.cmd.Args, State: api.ProcessRunning}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.b.Len() > 64<<10 {
		b.b.Reset()
	}
	return b.b.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return strings.TrimSpace(b.b.String())
}

// freeDisplay picks a display number no X server holds on this host.
func freeDisplay(t testing.TB) int {
	for n := 40 + os.Getpid()%50; n < 400; n++ {
		if _, err := os.Stat(fmt.Sprintf("/tmp/.X%d-lock", n)); err == nil {
			continue
		}
		if c, err := net.Dial("unix", fmt.Sprintf("@/tmp/.X11-unix/X%d", n)); err == nil {
			c.Close()
			continue
		}
		return n
	}
	t.Fatal("no free X display number")
	return 0
}

func freePort(t testing.TB) int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// startDesktop starts a desktop on the host for the test; it is stopped
// at the test's end.
func startDesktop(t testing.TB, w, h int) *Manager {
	t.Helper()
	for _, bin := range []string{"Xvfb", "openbox", "x11vnc"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Fatalf("%s is not installed: run scripts/install-test-deps.sh", bin)
		}
	}
	novnc := t.TempDir()
	os.WriteFile(novnc+"/vnc.html", []byte("<title>noVNC</title>"), 0o644)
	m := NewManager(Options{
		Spawner:    execSpawner{},
		Display:    freeDisplay(t),
		Dir:        t.TempDir(),
		VNCPort:    freePort(t),
		StreamPort: freePort(t),
		NoVNCDir:   novnc,
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	d, err := m.Start(ctx, api.StartDesktopRequest{Width: w, Height: h})
	if err != nil {
		t.Fatalf("starting the desktop: %v (%+v)", err, d)
	}
	t.Cleanup(func() { m.Stop() })
	return m
}
