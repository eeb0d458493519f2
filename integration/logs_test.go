package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// cliCombined runs the CLI with stdout and stderr on one pipe, as a
// terminal or `2>&1` has them: the order of the two streams shows.
func cliCombined(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, env.cliBin, args...)
	cmd.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	var b bytes.Buffer
	cmd.Stdout, cmd.Stderr = &b, &b
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return b.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatalf("running agentbox %v: %v", args, err)
	}
	return b.String(), 0
}

// TestLogsInterleaved: `agentbox logs` puts a background process's stdout
// and stderr back in the order it wrote them, stamps lines with -t, and
// drops older lines with --since. The process writes each line only once
// the test has seen the one before (it waits for a file), so the order
// is certain however loaded the host.
func TestLogsInterleaved(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	start := time.Now()
	script := `for i in 1 2 3; do
  echo out$i; while [ ! -e /tmp/o$i ]; do sleep 0.05; done
  echo err$i >&2; while [ ! -e /tmp/e$i ]; do sleep 0.05; done
done`
	out, errOut, code := cli(t, "", "exec", "-d", id, "--", "sh", "-c", script)
	pid := strings.TrimSpace(out)
	if code != 0 || pid == "" {
		t.Fatalf("exec -d: %d %q %q", code, out, errOut)
	}
	want := []string{"out1", "err1", "out2", "err2", "out3", "err3"}
	for k, line := range want {
		for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
			got, _ := cliCombined(t, "logs", id, pid)
			if strings.Contains(got, line+"\n") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("waiting for %q, logs show %q", line, got)
			}
		}
		sh(t, id, fmt.Sprintf("touch /tmp/%c%d", line[0], k/2+1))
	}
	if _, err := env.client.WaitProcess(context.Background(), id, pid, 60000); err != nil {
		t.Fatalf("wait: %v", err)
	}
	all := strings.Join(want, "\n") + "\n"
	if got, code := cliCombined(t, "logs", id, pid); code != 0 || got != all {
		t.Errorf("logs, 2>&1: exit %d, %q; want %q", code, got, all)
	}
	// Each stream still goes to its own descriptor.
	if o, e, code := cli(t, "", "logs", id, pid); code != 0 || o != "out1\nout2\nout3\n" || e != "err1\nerr2\nerr3\n" {
		t.Errorf("logs: exit %d, stdout %q, stderr %q", code, o, e)
	}
	if got, _ := cliCombined(t, "logs", "--tail", "1", id, pid); got != "out3\nerr3\n" {
		t.Errorf("logs --tail 1: %q", got)
	}

	// -t: an RFC 3339 time with nanoseconds before each line, never
	// going back, within the test's span.
	got, code := cliCombined(t, "logs", "-t", id, pid)
	lines := strings.Split(strings.TrimSuffix(got, "\n"), "\n")
	if code != 0 || len(lines) != len(want) {
		t.Fatalf("logs -t: exit %d, %q", code, got)
	}
	var stamps []time.Time
	for i, l := range lines {
		stamp, text, _ := strings.Cut(l, " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || text != want[i] || !strings.HasSuffix(stamp, "Z") || len(stamp) != len("2006-01-02T15:04:05.000000000Z") {
			t.Fatalf("logs -t line %q: want a fixed-width UTC RFC 3339 time, then %q (%v)", l, want[i], err)
		}
		if ts.Before(start.Add(-time.Second)) || ts.After(time.Now().Add(time.Second)) {
			t.Errorf("stamp %v outside the test's span (%v to now)", ts, start)
		}
		if i > 0 && !ts.After(stamps[i-1]) {
			t.Errorf("stamps do not rise: %q", got)
		}
		stamps = append(stamps, ts)
	}

	// --since: a time drops what came before it; a duration counts back
	// from now.
	since := stamps[3].Format(time.RFC3339Nano) // err2's
	if got, _ := cliCombined(t, "logs", "--since", since, id, pid); got != "err2\nout3\nerr3\n" {
		t.Errorf("logs --since %s: %q", since, got)
	}
	if got, _ := cliCombined(t, "logs", "--since", "1h", "-t", id, pid); got != strings.Join(lines, "\n")+"\n" {
		t.Errorf("logs --since 1h -t: %q", got)
	}
	if got, code := cliCombined(t, "logs", "--since", "0s", id, pid); code != 0 || got != "" {
		t.Errorf("logs --since 0s: exit %d, %q", code, got)
	}
	if got, code := cliCombined(t, "logs", "--since", "yesterday", id, pid); code != 2 || !strings.Contains(got, "RFC 3339") {
		t.Errorf("logs --since yesterday: exit %d, %q", code, got)
	}

	// -f -t follows a running process with stamps on what comes later.
	// Each line waits for the test to have seen the one before: lines of
	// two streams written a moment apart may be read by the agent in
	// either order (two pipes, two readers), so only an order the
	// process's writes were certain to have is checked.
	out, _, _ = cli(t, "", "exec", "-d", id, "--", "sh", "-c", "echo early; while [ ! -e /tmp/late ]; do sleep 0.05; done; echo late >&2; while [ ! -e /tmp/last ]; do sleep 0.05; done; echo last")
	pid2 := strings.TrimSpace(out)
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got, _ := cliCombined(t, "logs", id, pid2); got == "early\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("waiting for early: %q", got)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	follow := exec.CommandContext(ctx, env.cliBin, "logs", "-f", "-t", id, pid2)
	follow.Env = append(os.Environ(), "AGENTBOX_HOST=unix://"+env.cfg.Socket, "AGENTBOX_API_KEY="+env.key)
	var fb bytes.Buffer
	follow.Stdout, follow.Stderr = &fb, &fb
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	// Only what the follower printed before the touch is known to be
	// early; the rest may come either way: it waits for the exit.
	sh(t, id, "touch /tmp/late")
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if got, _ := cliCombined(t, "logs", id, pid2); got == "early\nlate\n" {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("waiting for late: %q", got)
		}
	}
	sh(t, id, "touch /tmp/last")
	if err := follow.Wait(); err != nil {
		t.Fatalf("logs -f -t: %v, %q", err, fb.String())
	}
	var texts []string
	var last time.Time
	for _, l := range strings.Split(strings.TrimSuffix(fb.String(), "\n"), "\n") {
		stamp, text, _ := strings.Cut(l, " ")
		ts, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || ts.Before(last) {
			t.Errorf("logs -f -t line %q: bad or falling stamp (%v)", l, err)
		}
		last = ts
		texts = append(texts, text)
	}
	if strings.Join(texts, ",") != "early,late,last" {
		t.Errorf("logs -f -t printed %q", fb.String())
	}
}

// TestOOMInPsAndInspect: a background process the OOM killer ends shows
// as such in ps, and inspect shows the sandbox's OOM kill count; a plain
// SIGKILL is not called an OOM.
func TestOOMInPsAndInspect(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 64})
	var sb api.Sandbox
	if out, _, code := cli(t, "", "inspect", id); code != 0 || json.Unmarshal([]byte(out), &sb) != nil || sb.OOMKills != 0 || sb.LastOOMAt != nil {
		t.Fatalf("inspect before any OOM: exit %d, %q", code, out)
	}
	out, errOut, code := cli(t, "", "exec", "-d", id, "--", "sh", "-c", `x=$(head -c 200000000 /dev/zero | tr '\0' a); echo survived ${#x}`)
	hog := strings.TrimSpace(out)
	if code != 0 || hog == "" {
		t.Fatalf("exec -d: %d %q %q", code, out, errOut)
	}
	out, _, _ = cli(t, "", "exec", "-d", id, "--", "sh", "-c", "kill -9 $$")
	plain := strings.TrimSpace(out)
	row := func(ps, pid string) string {
		for _, l := range strings.Split(ps, "\n") {
			if f := strings.Fields(l); len(f) > 0 && f[0] == pid {
				return l
			}
		}
		return ""
	}
	var ps string
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
		ps, _, _ = cli(t, "", "ps", id)
		if strings.Contains(row(ps, hog), "exited") && strings.Contains(row(ps, plain), "exited") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes did not end:\n%s", ps)
		}
	}
	if r := row(ps, hog); !strings.Contains(r, "exited (oom)") || !strings.Contains(r, "SIGKILL") {
		t.Errorf("ps row of the OOM-killed process: %q\n%s", r, ps)
	}
	if r := row(ps, plain); strings.Contains(r, "oom") {
		t.Errorf("ps row of a plain SIGKILL: %q", r)
	}
	// The usage sampler sees the count within its interval (5 s).
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		out, _, code = cli(t, "", "inspect", id)
		sb = api.Sandbox{}
		if code == 0 && json.Unmarshal([]byte(out), &sb) == nil && sb.OOMKills >= 1 && sb.LastOOMAt != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("inspect shows no OOM kill: exit %d\n%s", code, out)
		}
	}
	if !strings.Contains(out, `"oom_kills"`) || !strings.Contains(out, `"last_oom_at"`) {
		t.Errorf("inspect JSON: %s", out)
	}
}

// TestKillTerminalSession: `agentbox kill ID PID` ends a terminal session
// (what shell's hint says when its terminal goes away).
func TestKillTerminalSession(t *testing.T) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	sess, err := env.client.CreatePTY(ctx, id, api.CreatePTYRequest{Shell: "sleep 1000"})
	if err != nil {
		t.Fatal(err)
	}
	if _, errOut, code := cli(t, "", "kill", id, fmt.Sprint(sess.Pid)); code != 0 {
		t.Fatalf("kill of terminal session %d: exit %d, %q", sess.Pid, code, errOut)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		list, err := env.client.ListPTYs(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		running := false
		for _, s := range list {
			running = running || (s.Pid == sess.Pid && s.State != "exited")
		}
		if !running {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("terminal session %d still runs after kill: %+v", sess.Pid, list)
		}
	}
	if res := sh(t, id, "pgrep -x sleep || true"); strings.TrimSpace(res.Stdout) != "" {
		t.Errorf("the session's sleep survived: %q", res.Stdout)
	}
	if _, errOut, code := cli(t, "", "kill", id, "99999"); code == 0 || !strings.Contains(errOut, "99999") {
		t.Errorf("kill of no process: exit %d, %q", code, errOut)
	}
}
