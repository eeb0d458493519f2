package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/doctest"
)

// TestDocs runs every block README.md, docs/ and examples/ mark
// `<!-- doctest: run -->` (docs/doctest.md), file by file, each file's
// blocks in order in one bash session (variables carry over from block
// to block), against the test daemon restarted with the shipped defaults
// (default template base). A console block's commands each have the
// output the doc shows checked; a run block followed by an output block
// has its whole output checked. Sandboxes a doc leaves are destroyed.
func TestDocs(t *testing.T) {
	needBase(t)
	files, err := doctest.Files(env.repo)
	if err != nil {
		t.Fatal(err)
	}
	// The docs assume the shipped default template.
	restartDaemon(t, func() { env.cfg.DefaultTemplate = "base" })
	defer restartDaemon(t, func() { env.cfg.DefaultTemplate = "busybox" })
	ran := 0
	for _, f := range files {
		blocks, err := doctest.ParseFile(env.repo, f)
		if err != nil {
			t.Errorf("%v", err) // internal/doctest's TestDocsAreMarked says the same
			continue
		}
		var steps []docStep
		for _, b := range blocks {
			steps = append(steps, stepsOf(b)...)
		}
		if len(steps) == 0 {
			continue
		}
		t.Run(strings.ReplaceAll(f, "/", "_"), func(t *testing.T) {
			runDocSteps(t, f, steps)
		})
		ran += len(steps)
	}
	if ran == 0 {
		t.Fatal("no doc block is marked run")
	}
}

// docStep is one thing the session runs: a command of a console block, a
// whole sh or python block, or a setup comment; want is the output to
// check, if the doc shows one.
type docStep struct {
	b       *doctest.Block
	script  string
	python  bool
	want    string
	hasWant bool
}

func stepsOf(b *doctest.Block) []docStep {
	switch {
	case b.Kind == doctest.Setup:
		return []docStep{{b: b, script: b.Text}}
	case b.Kind != doctest.Run:
		return nil
	case b.Lang == "console":
		cmds, wants := doctest.Commands(b.Text)
		var out []docStep
		for i, c := range cmds {
			out = append(out, docStep{b: b, script: c + "\n", want: wants[i], hasWant: wants[i] != ""})
		}
		return out
	}
	s := docStep{b: b, script: b.Text, python: b.Lang == "python"}
	if b.Want != nil {
		s.want, s.hasWant = b.Want.Text, true
	}
	return []docStep{s}
}

// runDocSteps writes the steps of one doc as files and a bash driver that
// sources each in turn with set -e, its output in a file of its own, and
// then checks each step's output.
func runDocSteps(t *testing.T, file string, steps []docStep) {
	ctx := context.Background()
	before := map[string]bool{}
	list, _ := env.client.ListSandboxes(ctx, clientListAll())
	for _, sb := range list {
		before[sb.ID] = true
	}
	defer func() {
		list, _ := env.client.ListSandboxes(ctx, clientListAll())
		for _, sb := range list {
			if !before[sb.ID] {
				_ = env.client.DestroySandbox(ctx, sb.ID)
			}
		}
	}()

	work := t.TempDir()
	dir := t.TempDir() // the steps, outside the doc's working directory
	var driver strings.Builder
	driver.WriteString("set -eo pipefail\ncd " + work + "\n")
	for i, s := range steps {
		name := filepath.Join(dir, fmt.Sprintf("step%d", i))
		if err := os.WriteFile(name, []byte(s.script), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&driver, "echo %d > %s/current\n", i, dir)
		if s.python {
			fmt.Fprintf(&driver, "/usr/bin/python3 %s > %s.out 2>&1\n", name, name)
		} else {
			fmt.Fprintf(&driver, "source %s > %s.out 2>&1\n", name, name)
		}
	}
	fmt.Fprintf(&driver, "echo done > %s/current\n", dir)

	cctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(cctx, "bash", "-c", driver.String())
	cmd.Env = append(os.Environ(),
		"PATH="+filepath.Dir(env.cliBin)+":"+os.Getenv("PATH"),
		"AGENTBOX_HOST=unix://"+env.cfg.Socket,
		"AGENTBOX_API_KEY="+env.key,
		"PYTHONPATH="+filepath.Join(env.repo, "sdk/python"),
		"PYTHONDONTWRITEBYTECODE=1",
	)
	out, err := cmd.CombinedOutput()
	cur, _ := os.ReadFile(filepath.Join(dir, "current"))
	last := len(steps)
	if c := strings.TrimSpace(string(cur)); c != "done" {
		fmt.Sscan(c, &last)
	}
	for i := 0; i < len(steps) && i <= last; i++ {
		s := steps[i]
		got, _ := os.ReadFile(filepath.Join(dir, fmt.Sprintf("step%d.out", i)))
		where := fmt.Sprintf("%s:%d", s.b.File, s.b.Line)
		if i == last && err != nil {
			t.Fatalf("%s: the doc's %s block failed (%v) at:\n%s\noutput:\n%s%s", where, s.b.Lang, err, s.script, got, out)
		}
		if s.hasWant && !doctest.Match(s.want, string(got)) {
			t.Errorf("%s: the doc shows\n%s\nbut the command\n%s\nprinted\n%s", where, s.want, s.script, got)
		}
	}
	if err != nil {
		t.Fatalf("%s: the doc's session failed: %v\n%s", file, err, out)
	}
}
