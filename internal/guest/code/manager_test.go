package code

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func newTestManager(t *testing.T) (*Manager, *fakeSpawner) {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "usr/share/jupyter/kernels/fake")
	os.MkdirAll(dir, 0o755)
	os.WriteFile(filepath.Join(dir, "kernel.json"), []byte(`{"argv": ["fake", "-f", "{connection_file}"], "language": "python", "display_name": "Fake"}`), 0o644)
	sp := &fakeSpawner{t: t}
	// ipc paths must fit a sockaddr_un: keep the socket dir short.
	sock, err := os.MkdirTemp("", "abk")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sock) })
	m := NewManager(Options{Spawner: sp, Root: root, SocketDir: sock})
	t.Cleanup(m.Close)
	return m, sp
}

func run(t *testing.T, m *Manager, req api.RunCodeRequest) api.Execution {
	t.Helper()
	var ex api.Execution
	var types []string
	if err := m.Run(context.Background(), req, func(ev api.CodeEvent) {
		types = append(types, ev.Type)
		ex.Add(ev)
	}); err != nil {
		t.Fatalf("Run(%q): %v", req.Code, err)
	}
	if types[len(types)-1] != api.CodeEventEnd {
		t.Fatalf("Run(%q): last event %q, want end_of_execution; events %v", req.Code, types[len(types)-1], types)
	}
	return ex
}

func TestRunResults(t *testing.T) {
	m, _ := newTestManager(t)
	ex := run(t, m, api.RunCodeRequest{Code: "1+1"})
	if ex.Status != api.CodeStatusOK || len(ex.Results) != 1 || ex.Results[0].Text != "2" || !ex.Results[0].IsMain || ex.ExecutionCount != 1 || ex.Context != "python" || ex.Restarted {
		t.Fatalf("1+1: %+v", ex)
	}
	ex = run(t, m, api.RunCodeRequest{Code: "print"})
	if got := strings.Join(ex.Logs.Stdout, ""); got != "a\n" {
		t.Errorf("stdout %q", got)
	}
	if got := strings.Join(ex.Logs.Stderr, ""); got != "b\n" {
		t.Errorf("stderr %q", got)
	}
	if len(ex.Results) != 2 {
		t.Fatalf("results %+v", ex.Results)
	}
	d, r := ex.Results[0], ex.Results[1]
	if d.IsMain || d.PNG != "iVBORw==" || d.HTML != "<b>x</b>" || string(d.Extra["application/x-custom"]) != `{"n":1}` {
		t.Errorf("display result %+v", d)
	}
	if !r.IsMain || r.Text != "'done'" || string(r.JSON) != `{"k":2}` || r.ExecutionCount != 2 {
		t.Errorf("main result %+v", r)
	}
	ex = run(t, m, api.RunCodeRequest{Code: "raise"})
	if ex.Status != api.CodeStatusError || ex.Error == nil || ex.Error.Name != "ZeroDivisionError" || ex.Error.Traceback != "Traceback\nline 1" {
		t.Errorf("error: %+v %+v", ex, ex.Error)
	}
	cs := m.List()
	if len(cs) != 1 || cs[0].ID != "python" || cs[0].State != api.CodeIdle || cs[0].ExecutionCount != 3 || cs[0].Kernel != "fake" {
		t.Errorf("contexts %+v", cs)
	}
}

func TestRunTimeouts(t *testing.T) {
	m, sp := newTestManager(t)
	// An interrupt that works: the state is kept.
	ex := run(t, m, api.RunCodeRequest{Code: "sleep", TimeoutMs: 50})
	if ex.Status != api.CodeStatusTimeout || ex.Restarted || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
		t.Fatalf("sleep: %+v %+v", ex, ex.Error)
	}
	// A kernel that ignores it: restarted, and the run says so.
	ex = run(t, m, api.RunCodeRequest{Code: "hang", TimeoutMs: 50})
	if ex.Status != api.CodeStatusTimeout || !ex.Restarted || ex.Error == nil || ex.Error.Name != "TimeoutError" {
		t.Fatalf("hang: %+v %+v", ex, ex.Error)
	}
	if len(sp.procs) != 2 {
		t.Errorf("%d kernels started, want 2", len(sp.procs))
	}
	ex = run(t, m, api.RunCodeRequest{Code: "1+1"})
	if ex.Status != api.CodeStatusOK || ex.Restarted || ex.ExecutionCount != 1 {
		t.Fatalf("after restart: %+v", ex)
	}
	c, _ := m.Get("python")
	if c.Restarts != 1 {
		t.Errorf("restarts %d, want 1", c.Restarts)
	}
}

func TestKernelDeath(t *testing.T) {
	m, _ := newTestManager(t)
	ex := run(t, m, api.RunCodeRequest{Code: "die"})
	if ex.Status != api.CodeStatusKernelDied || ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "out of memory") {
		t.Fatalf("die: %+v %+v", ex, ex.Error)
	}
	c, _ := m.Get("python")
	if c.State != api.CodeDead || !strings.Contains(c.LastExit, "SIGKILL") {
		t.Errorf("context after death: %+v", c)
	}
	ex = run(t, m, api.RunCodeRequest{Code: "1+1"})
	if ex.Status != api.CodeStatusOK || !ex.Restarted || ex.Results[0].Text != "2" {
		t.Fatalf("after death: %+v", ex)
	}
}

func TestContexts(t *testing.T) {
	m, _ := newTestManager(t)
	ctx := context.Background()
	c, err := m.Create(ctx, api.CreateCodeContextRequest{ID: "a", Language: "py", Env: map[string]string{"X": "1"}})
	if err != nil || c.ID != "a" || c.Language != "python" || c.State != api.CodeIdle {
		t.Fatalf("create: %+v %v", c, err)
	}
	for _, tc := range []struct {
		name string
		req  api.CreateCodeContextRequest
		want error
	}{
		{"duplicate", api.CreateCodeContextRequest{ID: "a"}, errdefs.ErrAlreadyExists},
		{"bad id", api.CreateCodeContextRequest{ID: "../x"}, errdefs.ErrInvalidArgument},
		{"unknown language", api.CreateCodeContextRequest{Language: "cobol"}, errdefs.ErrInvalidArgument},
		{"bad env", api.CreateCodeContextRequest{Env: map[string]string{"A=B": "1"}}, errdefs.ErrInvalidArgument},
	} {
		if _, err := m.Create(ctx, tc.req); !errors.Is(err, tc.want) {
			t.Errorf("%s: got %v, want %v", tc.name, err, tc.want)
		}
	}
	if err := m.Run(ctx, api.RunCodeRequest{Code: "1", Context: "a", Language: "python"}, func(api.CodeEvent) {}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("context and language: %v", err)
	}
	if err := m.Run(ctx, api.RunCodeRequest{Code: "1", Context: "nope"}, func(api.CodeEvent) {}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("unknown context: %v", err)
	}
	if _, err := m.Restart(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if c, _ := m.Get("a"); c.Restarts != 1 || c.State != api.CodeIdle {
		t.Errorf("after restart: %+v", c)
	}
	if err := m.Delete("a"); err != nil {
		t.Fatal(err)
	}
	if len(m.List()) != 0 {
		t.Errorf("contexts after delete: %+v", m.List())
	}
}

func TestInterruptAndDisconnect(t *testing.T) {
	m, _ := newTestManager(t)
	run(t, m, api.RunCodeRequest{Code: "1+1"})
	done := make(chan api.Execution)
	go func() { done <- run(t, m, api.RunCodeRequest{Code: "sleep", TimeoutMs: -1}) }()
	waitState(t, m, "python", api.CodeBusy)
	if _, err := m.Interrupt(context.Background(), "python"); err != nil {
		t.Fatal(err)
	}
	ex := <-done
	if ex.Status != api.CodeStatusInterrupted || ex.Restarted {
		t.Fatalf("interrupted: %+v", ex)
	}
	// A caller that goes away interrupts its cell.
	ctx, cancel := context.WithCancel(context.Background())
	ended := make(chan string, 1)
	go m.Run(ctx, api.RunCodeRequest{Code: "sleep", TimeoutMs: -1}, func(ev api.CodeEvent) {
		if ev.Type == api.CodeEventEnd {
			ended <- ev.Status
		}
	})
	waitState(t, m, "python", api.CodeBusy)
	cancel()
	if st := <-ended; st != api.CodeStatusInterrupted {
		t.Errorf("after disconnect: status %q", st)
	}
}

func waitState(t *testing.T, m *Manager, id, state string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if c, err := m.Get(id); err == nil && c.State == state {
			return
		}
	}
	t.Fatalf("context %s never became %s", id, state)
}
