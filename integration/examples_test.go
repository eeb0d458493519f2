package integration

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The examples in examples/ run for real with Debian's python3 and the SDK
// from sdk/python against this package's daemon.

func runExample(t *testing.T, script string, args ...string) (string, error) {
	t.Helper()
	py := "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		t.Fatalf("%s is missing: run scripts/install-deps.sh", py)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, append([]string{filepath.Join(env.repo, "examples", script)}, args...)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(),
		"AGENTBOX_HOST=unix://"+env.cfg.Socket,
		"AGENTBOX_API_KEY="+env.key,
		"PYTHONPATH="+filepath.Join(env.repo, "sdk/python"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("%s (%s):\n%s", script, time.Since(start).Round(time.Millisecond), out)
	return string(out), err
}

func TestExampleAgentLoop(t *testing.T) {
	needBase(t)
	out, err := runExample(t, "agent_loop.py")
	if err != nil {
		t.Fatalf("agent_loop.py failed: %v", err)
	}
	// The scripted model's first three candidates are wrong: the loop
	// must have seen each fail, fed it back, and passed on the fourth.
	for _, want := range []string{"attempt 1: tests fail", "SyntaxError", "attempt 3: tests fail", "attempt 4: tests pass", "solved after 4 attempts"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// With too few attempts it must report failure, not success.
	out, err = runExample(t, "agent_loop.py", "--max-attempts", "2")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("agent_loop.py --max-attempts 2: %v, want exit status 1\n%s", err, out)
	}
}

func TestExampleDataAnalysis(t *testing.T) {
	if !env.hasPython {
		t.Fatal("the python template is missing: run scripts/build-template.sh python --no-import (scripts/test.sh does)")
	}
	png := filepath.Join(t.TempDir(), "chart.png")
	out, err := runExample(t, "data_analysis.py", "--out", png)
	if err != nil {
		t.Fatalf("data_analysis.py failed: %v", err)
	}
	b, err := os.ReadFile(png)
	if err != nil {
		t.Fatalf("no chart downloaded: %v", err)
	}
	if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) || len(b) < 1000 {
		t.Fatalf("chart.png is %d bytes starting %q, want a PNG", len(b), b[:min(len(b), 8)])
	}
	for _, want := range []string{"rows: 1095", "revenue by region:", "north"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Without pandas (the base template) it must fail with a clear hint.
	out, err = runExample(t, "data_analysis.py", "--template", "base", "--out", png+".2")
	if err == nil || !strings.Contains(out, "--template python") {
		t.Fatalf("data_analysis.py --template base: %v, want a failure that points to the python template\n%s", err, out)
	}
}
