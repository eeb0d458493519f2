package integration

// What a program inside a sandbox sees (docs/sandbox-view.md): the
// built-in templates' environment, on every tier.

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// builtinTemplateEnv is the env scripts/build-template.sh imports the
// built-in templates with (its `ENV=(--env K=V ...)` line), so that the
// test daemon's templates carry what users' do.
func builtinTemplateEnv() map[string]string {
	f, err := os.Open(filepath.Join(env.repo, "scripts/build-template.sh"))
	if err != nil {
		panic(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "ENV=(") {
			continue
		}
		fields := strings.Fields(strings.TrimSuffix(strings.TrimPrefix(line, "ENV=("), ")"))
		for i := 0; i+1 < len(fields); i += 2 {
			if k, v, ok := strings.Cut(fields[i+1], "="); fields[i] == "--env" && ok {
				out[k] = v
			}
		}
	}
	if out["PATH"] == "" {
		panic("scripts/build-template.sh has no ENV=(--env PATH=... ) line")
	}
	return out
}

// TestPythonBytecodeTrap: an agent writes calc.py, imports it, writes a
// fix of the same size within the same second and imports it again. With
// Python's .pyc cache (keyed on mtime in seconds and size) the second run
// would see the old code; the built-in templates set
// PYTHONDONTWRITEBYTECODE=1, and a create's env can set it back.
func TestPythonBytecodeTrap(t *testing.T) {
	needBase(t)
	if got := builtinTemplateEnv()["PYTHONDONTWRITEBYTECODE"]; got != "1" {
		t.Fatalf("scripts/build-template.sh imports the built-in templates with PYTHONDONTWRITEBYTECODE=%q, want 1", got)
	}
	// Both versions get the same mtime (the same second) on purpose: the
	// trap is then certain, not a race.
	const loop = `cd /tmp && rm -rf trap && mkdir trap && cd trap
echo 'def f(): return 1' > calc.py && touch -d @1700000000 calc.py
python3 -c 'import calc; print("first", calc.f())'
echo 'def f(): return 2' > calc.py && touch -d @1700000000 calc.py
python3 -c 'import calc; print("second", calc.f())'
ls -d __pycache__ 2>/dev/null || echo no-cache`
	for _, tier := range batteryTiers(t) {
		t.Run(tier, func(t *testing.T) {
			id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier})
			out := mustSh(t, id, loop)
			if !strings.Contains(out, "first 1") || !strings.Contains(out, "second 2") || !strings.Contains(out, "no-cache") {
				t.Errorf("with the template's env, the fix is not what runs, or a cache was written:\n%s", out)
			}
			if got := mustSh(t, id, `echo "$PYTHONDONTWRITEBYTECODE"`); got != "1" {
				t.Errorf("PYTHONDONTWRITEBYTECODE inside = %q, want 1", got)
			}
			// Overridable: an empty value turns the cache back on (and
			// with it the trap, which shows the cache was written).
			id2 := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier, Env: map[string]string{"PYTHONDONTWRITEBYTECODE": ""}})
			out = mustSh(t, id2, loop)
			if !strings.Contains(out, "second 1") || !strings.Contains(out, "__pycache__") {
				t.Errorf("with PYTHONDONTWRITEBYTECODE set empty at create, the cache should be written (and the old code run):\n%s", out)
			}
		})
	}
}
