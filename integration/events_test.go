package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// eventsCLI is a running `agentbox events`, its stdout read line by line.
type eventsCLI struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when both pipes are drained

	mu     sync.Mutex
	lines  []string
	stderr []string
}

// followEvents starts `agentbox events args...` with the admin key and
// returns once it says it is subscribed (on stderr), so that everything
// the test does next is on its stream.
func followEvents(t *testing.T, args ...string) *eventsCLI {
	t.Helper()
	cmd := exec.Command(env.cliBin, append([]string{"events"}, args...)...)
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f := &eventsCLI{cmd: cmd, done: make(chan struct{})}
	var wg sync.WaitGroup
	for _, p := range []struct {
		r   io.Reader
		dst *[]string
	}{{stdout, &f.lines}, {stderr, &f.stderr}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sc := bufio.NewScanner(p.r)
			for sc.Scan() {
				f.mu.Lock()
				*p.dst = append(*p.dst, sc.Text())
				f.mu.Unlock()
			}
		}()
	}
	go func() { wg.Wait(); close(f.done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	f.wait(t, "its subscription", func(_, stderr []string) bool {
		for _, l := range stderr {
			if strings.Contains(l, "following events") {
				return true
			}
		}
		return false
	})
	return f
}

// wait polls until ok accepts the stdout and stderr lines printed so
// far, or two minutes pass.
func (f *eventsCLI) wait(t *testing.T, what string, ok func(lines, stderr []string) bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		f.mu.Lock()
		lines, stderr := append([]string(nil), f.lines...), append([]string(nil), f.stderr...)
		f.mu.Unlock()
		if ok(lines, stderr) {
			return
		}
		select {
		case <-f.done:
			t.Fatalf("agentbox events ended before %s; stdout %q, stderr %q", what, lines, stderr)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("agentbox events: no %s in 2 minutes; stdout %q, stderr %q", what, lines, stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshot returns the lines printed so far.
func (f *eventsCLI) snapshot() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.lines...)
}

// stop interrupts it, as a user's ^C does, and wants exit status 0.
func (f *eventsCLI) stop(t *testing.T) {
	t.Helper()
	if err := f.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	<-f.done
	if err := f.cmd.Wait(); err != nil {
		t.Errorf("agentbox events after an interrupt: %v, want exit status 0", err)
	}
}

// textEvent parses a line of `agentbox events` (time, type, sandbox,
// tenant=..., detail) into its type and sandbox.
func textEvent(line string) (typ, sandbox string) {
	fs := strings.Fields(line)
	if len(fs) < 4 {
		return "", ""
	}
	return fs[1], fs[2]
}

// TestEventsCLI: `agentbox events` (the real binary) follows the stream
// while sandboxes are made and removed with the CLI: --type keeps those
// types only, --sandbox that sandbox only, --json prints api.Event lines;
// an interrupt ends it with status 0; an unknown type is refused.
func TestEventsCLI(t *testing.T) {
	if _, errOut, code := cli(t, "", "events", "--type", "bogus"); code == 0 || !strings.Contains(errOut, `unknown event type "bogus"`) {
		t.Errorf("events --type bogus: exit %d, stderr %q; want an error naming the type", code, errOut)
	}
	mk := func() string {
		out, errOut, code := cli(t, "", "create", "--template", "busybox")
		if code != 0 {
			t.Fatalf("create: exit %d: %s", code, errOut)
		}
		id := strings.TrimSpace(out)
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), id) })
		return id
	}
	run := func(args ...string) {
		if _, errOut, code := cli(t, "", args...); code != 0 {
			t.Fatalf("agentbox %v: exit %d: %s", args, code, errOut)
		}
	}

	typed := followEvents(t, "--json", "--type", "created,destroyed")
	a := mk()
	run("pause", a)
	run("resume", a)
	run("rm", a)
	// jsonEvents parses the --json lines; a line that is not an event
	// is a failure.
	jsonEvents := func(lines []string) []api.Event {
		var evs []api.Event
		for _, l := range lines {
			var e api.Event
			if err := json.Unmarshal([]byte(l), &e); err != nil || e.Seq == 0 || e.Time.IsZero() {
				t.Fatalf("events --json printed %q (%v), want an event with its seq and time", l, err)
			}
			evs = append(evs, e)
		}
		return evs
	}
	saw := func(typ, id string) func(lines, _ []string) bool {
		return func(lines, _ []string) bool {
			for _, l := range lines {
				if strings.Contains(l, `"type":"`+typ+`","sandbox":"`+id+`"`) {
					return true
				}
			}
			return false
		}
	}
	typed.wait(t, "destroyed event of "+a, saw("destroyed", a))
	var forA []string
	for _, e := range jsonEvents(typed.snapshot()) {
		if e.Type != "created" && e.Type != "destroyed" {
			t.Errorf("events --type created,destroyed printed %+v", e)
		}
		if e.Sandbox == a {
			if e.Template != "busybox" {
				t.Errorf("event %+v lacks its template", e)
			}
			forA = append(forA, e.Type)
		}
	}
	if strings.Join(forA, ",") != "created,destroyed" {
		t.Errorf("events --type created,destroyed for %s: %v, want created, destroyed", a, forA)
	}

	b, c := mk(), mk()
	bySandbox := followEvents(t, "--sandbox", b)
	for _, id := range []string{c, b} {
		run("pause", id)
		run("resume", id)
	}
	run("rm", c)
	run("rm", b)
	bySandbox.wait(t, "destroyed event of "+b, func(lines, _ []string) bool {
		for _, l := range lines {
			if typ, sb := textEvent(l); typ == "destroyed" && sb == b {
				return true
			}
		}
		return false
	})
	var types []string
	for _, l := range bySandbox.snapshot() {
		typ, sb := textEvent(l)
		if sb != b {
			t.Errorf("events --sandbox %s printed %q", b, l)
		}
		types = append(types, typ)
	}
	if strings.Join(types, ",") != "paused,resumed,destroyed" {
		t.Errorf("events --sandbox %s: %v, want paused, resumed, destroyed", b, types)
	}
	// The typed stream had b's and c's creates and destroys, in order.
	typed.wait(t, "destroyed event of "+b, saw("destroyed", b))
	var order []string
	for _, e := range jsonEvents(typed.snapshot()) {
		switch e.Sandbox {
		case b:
			order = append(order, e.Type+" b")
		case c:
			order = append(order, e.Type+" c")
		}
	}
	if got := strings.Join(order, ", "); got != "created b, created c, destroyed c, destroyed b" {
		t.Errorf("events --type created,destroyed for b and c: %s", got)
	}
	typed.stop(t)
	bySandbox.stop(t)
}

// nextEvent reads st until ok accepts an event, and returns it and the
// events it skipped. The stream's context bounds the wait.
func nextEvent(t *testing.T, st *client.EventStream, what string, ok func(api.Event) bool) (api.Event, []api.Event) {
	t.Helper()
	var skipped []api.Event
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatalf("waiting for %s (after %+v): %v", what, skipped, err)
		}
		if ok(e) {
			return e, skipped
		}
		skipped = append(skipped, e)
	}
}

// events subscribes to types for at most d.
func eventsOf(t *testing.T, d time.Duration, types ...string) *client.EventStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	st, err := env.client.Events(ctx, client.EventFilter{Types: types})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func isEvent(typ, id string) func(api.Event) bool {
	return func(e api.Event) bool { return e.Type == typ && e.Sandbox == id }
}

// TestEventsLifecycle: the lifecycle events that need a real cause:
// expired (a short TTL; destroyed or, with on_timeout pause, paused
// follows), forked, oom (a memory hog), failed (a create whose template
// cannot start; an init that dies).
func TestEventsLifecycle(t *testing.T) {
	ctx := context.Background()
	t.Run("expired", func(t *testing.T) {
		st := eventsOf(t, 2*time.Minute, "expired", "destroyed", "paused")
		gone, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", TTLSeconds: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), gone.ID) })
		kept, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", TTLSeconds: 2, OnTimeout: api.OnTimeoutPause})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), kept.ID) })
		var after = map[string]string{gone.ID: "destroyed", kept.ID: "paused"}
		seen := map[string][]string{}
		for len(seen[gone.ID]) < 2 || len(seen[kept.ID]) < 2 {
			e, _ := nextEvent(t, st, "the expiries", func(e api.Event) bool { return after[e.Sandbox] != "" })
			if e.Type == "expired" && e.Detail != "ttl" {
				t.Errorf("expired event %+v, want detail ttl", e)
			}
			seen[e.Sandbox] = append(seen[e.Sandbox], e.Type)
		}
		for id, then := range after {
			if got := strings.Join(seen[id], ","); got != "expired,"+then {
				t.Errorf("sandbox %s: %s, want expired then %s", id, got, then)
			}
		}
	})
	t.Run("forked", func(t *testing.T) {
		st := eventsOf(t, 2*time.Minute, "created", "forked")
		parent := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
		kids, err := env.client.ForkSandbox(ctx, parent, 1)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), kids[0].ID) })
		e, skipped := nextEvent(t, st, "the fork's event", func(e api.Event) bool { return e.Sandbox == kids[0].ID })
		if e.Type != "forked" || e.Detail != "parent "+parent {
			t.Errorf("the fork's first event %+v, want forked with detail %q", e, "parent "+parent)
		}
		found := false
		for _, s := range skipped {
			found = found || isEvent("created", parent)(s)
		}
		if !found {
			t.Errorf("no created event for the parent %s before the fork's: %+v", parent, skipped)
		}
	})
	t.Run("oom", func(t *testing.T) {
		st := eventsOf(t, 3*time.Minute, "oom")
		id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 64})
		if res := sh(t, id, `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`); !res.OOMKilled {
			t.Fatalf("the hog was not OOM-killed: %+v", res)
		}
		// The usage sampler sees the kill within an interval or two.
		e, _ := nextEvent(t, st, "the oom event", isEvent("oom", id))
		if !strings.Contains(e.Detail, "OOM killer killed") {
			t.Errorf("oom event %+v, want the count in its detail", e)
		}
	})
	t.Run("failed create", func(t *testing.T) {
		name := "itest-evfail-" + randHex(3)
		removeTemplate(t, name)
		if _, _, err := buildEvents(t, name, "from: busybox\nsteps:\n  - start: echo cannot-start; exit 4\n  - ready: {port: 8123, timeout: 10s}\n", nil); err != nil {
			t.Fatal(err)
		}
		st := eventsOf(t, 2*time.Minute, "created", "failed", "destroyed")
		if _, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name}); err == nil {
			t.Fatal("create of a template whose start command exits succeeded")
		}
		created, _ := nextEvent(t, st, "the created event", func(e api.Event) bool { return e.Type == "created" && e.Template == name })
		failed, _ := nextEvent(t, st, "the failed event", func(e api.Event) bool { return e.Sandbox == created.Sandbox })
		if failed.Type != "failed" || !strings.Contains(failed.Detail, "exited (code 4)") || failed.Isolation == "" {
			t.Errorf("after created, %+v; want failed with the start command's exit and the tier", failed)
		}
		if e, _ := nextEvent(t, st, "the destroyed event", func(e api.Event) bool { return e.Sandbox == created.Sandbox }); e.Type != "destroyed" {
			t.Errorf("after failed, %+v; want destroyed", e)
		}
	})
	t.Run("failed init", func(t *testing.T) {
		st := eventsOf(t, 2*time.Minute, "failed")
		id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(sb.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		e, _ := nextEvent(t, st, "the failed event", isEvent("failed", id))
		if !strings.Contains(e.Detail, "init exited unexpectedly") {
			t.Errorf("failed event %+v, want the init's exit as its detail", e)
		}
	})
}
