package integration

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage/ocitest"
)

// Template builds (issue 3): each step runs in a real sandbox and becomes
// a cached layer; see docs/templates.md.

func poolDir(parts ...string) string {
	return filepath.Join(append([]string{env.cfg.DataDir, "storage"}, parts...)...)
}

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// buildEvents builds name from spec with the SDK and returns the
// template, the events and the error.
func buildEvents(t *testing.T, name, spec string, bctx []byte) (*api.Template, []api.BuildEvent, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var evs []api.BuildEvent
	var r *bytes.Reader
	if bctx != nil {
		r = bytes.NewReader(bctx)
	}
	var tpl *api.Template
	var err error
	if r != nil {
		tpl, err = env.client.BuildTemplate(ctx, name, []byte(spec), r, func(ev api.BuildEvent) { evs = append(evs, ev) })
	} else {
		tpl, err = env.client.BuildTemplate(ctx, name, []byte(spec), nil, func(ev api.BuildEvent) { evs = append(evs, ev) })
	}
	return tpl, evs, err
}

// stepsRun returns the numbers of the steps that ran (not cached) and
// made a layer.
func stepsRun(evs []api.BuildEvent) (ran, cached []int) {
	for _, ev := range evs {
		if ev.Type == api.BuildEventStep && ev.Layer != "" {
			if ev.Cached {
				cached = append(cached, ev.Step)
			} else {
				ran = append(ran, ev.Step)
			}
		}
	}
	return ran, cached
}

func entries(t *testing.T, dir string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		out[e.Name()] = true
	}
	return out
}

func removeTemplate(t *testing.T, name string) {
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })
}

const buildSpec5 = `from: busybox
steps:
  - run: echo one > /one && mkdir -p /data
  - copy: app /srv/app
  - env: {GREETING: hi}
  - workdir: /srv/app
  - run: echo "$GREETING $(pwd) $(cat hello.txt)" > /data/two
`

// TestTemplateBuild: a five-step spec builds with the CLI, a sandbox from
// it sees every step's effect on the template's own layers (shared, not
// copied), a rebuild with nothing changed is all cache and makes no new
// version (under a second), and changing the last step reruns only it.
func TestTemplateBuild(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"app/hello.txt": "hello-file", "app/sub/x": "x", "spec.yaml": buildSpec5})
	name := "itest-build-" + randHex(3)
	removeTemplate(t, name)

	t0 := time.Now()
	out, errOut, code := cli(t, "", "template", "build", filepath.Join(dir, "spec.yaml"), "--name", name)
	if code != 0 || !strings.HasPrefix(out, name+" 1") {
		t.Fatalf("template build: code %d out %q err %q", code, out, errOut)
	}
	t.Logf("first build (3 layered steps on busybox): %v", time.Since(t0).Round(time.Millisecond))
	for _, want := range []string{"step 1/5: run: echo one", "step 2/5: copy app -> /srv/app", "step 5/5: run:", "built " + name + " version 1 (3 layers on busybox@1)"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("build output lacks %q:\n%s", want, errOut)
		}
	}

	tpl, err := env.client.GetTemplate(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	if tpl.From != "busybox@1" || len(tpl.Layers) != 3 || tpl.Workdir != "/srv/app" || tpl.Env["GREETING"] != "hi" || len(tpl.Versions) != 1 {
		t.Fatalf("template: %+v", tpl)
	}
	out, errOut, code = cli(t, "", "template", "inspect", "--pretty", name)
	if code != 0 || !strings.Contains(out, "from:     busybox@1") || !strings.Contains(out, tpl.Layers[0]) || !strings.Contains(out, "versions: 1") ||
		!strings.Contains(out, "run: echo one > /one") || len(tpl.LayerInfo) != 3 || tpl.LayerInfo[2].Step != "run: echo one > /one && mkdir -p /data" {
		t.Errorf("template inspect: code %d\n%s%s", code, out, errOut)
	}

	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	got := mustSh(t, id, `cat /one /srv/app/hello.txt /srv/app/sub/x; echo; cat /data/two; pwd; echo $GREETING`)
	if want := "one\nhello-filex\nhi /srv/app hello-file\n/srv/app\nhi"; got != want {
		t.Errorf("sandbox from the built template sees:\n%s\nwant:\n%s", got, want)
	}
	// No per-sandbox copy: the sandbox's overlay stacks on the template's
	// layers and busybox's rootfs themselves.
	sb, err := env.client.GetSandbox(context.Background(), id)
	if err != nil || sb.TemplateVersion != "1" || sb.Template != name {
		t.Fatalf("sandbox: %+v %v", sb, err)
	}
	for _, l := range tpl.Layers {
		if _, err := os.Stat(poolDir("layers", l, "upper")); err != nil {
			t.Errorf("layer %s: %v", l, err)
		}
	}
	// The layers' files are read through the overlay, not copied into the
	// sandbox's own layer (its mountinfo names no host path to check:
	// TestMountinfoHidesHost).
	for _, f := range []string{"one", "srv", "data"} {
		if _, err := os.Lstat(poolDir("sandboxes", id, "upper", f)); err == nil {
			t.Errorf("/%s of the template's layers was copied into the sandbox's layer", f)
		}
	}
	if _, err := os.Stat(poolDir("sandboxes", id, "upper")); err != nil {
		t.Errorf("the sandbox's layer: %v", err)
	}

	// Creating from the built template costs what creating from its base
	// costs: the best of three of each (loose bound; the figures are logged).
	best := func(tpl string) time.Duration {
		var b time.Duration
		for i := 0; i < 3; i++ {
			t0 := time.Now()
			sid := newSandbox(t, api.CreateSandboxRequest{Template: tpl})
			d := time.Since(t0)
			_ = env.client.DestroySandbox(context.Background(), sid)
			if b == 0 || d < b {
				b = d
			}
		}
		return b
	}
	fromBase, fromBuilt := best("busybox"), best(name)
	t.Logf("create, best of 3: from busybox %v, from the built template (3 layers on busybox) %v", fromBase.Round(time.Microsecond), fromBuilt.Round(time.Microsecond))
	if fromBuilt > 3*fromBase+300*time.Millisecond {
		t.Errorf("creating from the built template (%v) costs far more than from busybox (%v)", fromBuilt, fromBase)
	}

	// Nothing changed: every layered step is cached, the version stays.
	spec := []byte(buildSpec5)
	tar := tarDir(t, dir)
	t0 = time.Now()
	tpl2, evs, err := buildEvents(t, name, string(spec), tar)
	took := time.Since(t0)
	if err != nil {
		t.Fatal(err)
	}
	ran, cached := stepsRun(evs)
	t.Logf("rebuild with nothing changed: %v (cached steps %v)", took.Round(time.Millisecond), cached)
	if len(ran) != 0 || len(cached) != 3 || tpl2.Version != "1" {
		t.Errorf("unchanged rebuild: ran %v cached %v version %s", ran, cached, tpl2.Version)
	}

	// Change the last step: only it reruns, as a new version.
	spec2 := strings.Replace(buildSpec5, `> /data/two`, `> /data/two; echo changed > /data/three`, 1)
	tpl3, evs, err := buildEvents(t, name, spec2, tar)
	if err != nil {
		t.Fatal(err)
	}
	ran, cached = stepsRun(evs)
	if len(ran) != 1 || ran[0] != 5 || len(cached) != 2 || tpl3.Version != "2" {
		t.Errorf("last step changed: ran %v cached %v version %s", ran, cached, tpl3.Version)
	}
	if tpl3.Layers[1] != tpl.Layers[1] || tpl3.Layers[2] != tpl.Layers[2] || tpl3.Layers[0] == tpl.Layers[0] {
		t.Errorf("layers: v1 %v v2 %v: the first two should be shared", tpl.Layers, tpl3.Layers)
	}
	// Changing a copied file reruns the copy step and what follows.
	writeFiles(t, dir, map[string]string{"app/hello.txt": "hello-2"})
	_, evs, err = buildEvents(t, name, spec2, tarDir(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if ran, cached = stepsRun(evs); len(ran) != 2 || ran[0] != 2 || len(cached) != 1 {
		t.Errorf("copied file changed: ran %v cached %v", ran, cached)
	}
	// The first sandbox still runs on version 1.
	if got := mustSh(t, id, `cat /data/two`); got != "hi /srv/app hello-file" {
		t.Errorf("version 1 sandbox now sees %q", got)
	}
}

// tarDir tars dir the way the CLI does (regular files and dirs).
func tarDir(t *testing.T, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		if rel == "." {
			return nil
		}
		link := ""
		if fi.Mode()&os.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		h, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		h.Name = filepath.ToSlash(rel)
		h.Uid, h.Gid, h.Uname, h.Gname = 0, 0, "", ""
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			_, err = tw.Write(b)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestTemplateBuildFailure: a failing step reports its output and exit
// code, and leaves no template and no build sandbox; so does an apt step
// where apt cannot work.
func TestTemplateBuildFailure(t *testing.T) {
	before := entries(t, poolDir("sandboxes"))
	for _, c := range []struct{ spec, want string }{
		{"from: busybox\nsteps:\n  - run: echo fine > /a\n  - run: echo boom-output; exit 3\n", "boom-output"},
		{"from: busybox\nsteps:\n  - apt: [curl]\n", "apt-get"},
	} {
		name := "itest-fail-" + randHex(3)
		removeTemplate(t, name)
		_, evs, err := buildEvents(t, name, c.spec, nil)
		if err == nil {
			t.Fatalf("build of %q succeeded", c.spec)
		}
		if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "failed with exit code") || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error: %v", err)
		}
		var sawOutput, sawExit bool
		for _, ev := range evs {
			if ev.Type == api.BuildEventOutput && strings.Contains(ev.Text, c.want) {
				sawOutput = true
			}
			if ev.Type == api.BuildEventStepDone && ev.ExitCode != nil && *ev.ExitCode != 0 {
				sawExit = true
			}
		}
		if !sawOutput || !sawExit {
			t.Errorf("events lack the output (%v) or the exit code (%v): %+v", sawOutput, sawExit, evs)
		}
		if _, err := env.client.GetTemplate(context.Background(), name); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a failed build left template %s: %v", name, err)
		}
		if _, err := os.Stat(poolDir("templates", name)); err == nil {
			if ents := entries(t, poolDir("templates", name)); len(ents) > 0 {
				t.Errorf("a failed build left %v in templates/%s", ents, name)
			}
		}
	}
	// Exit code 3 is what the first build reported.
	_, _, err := buildEvents(t, "itest-fail-"+randHex(3), "from: busybox\nsteps:\n  - run: exit 3\n", nil)
	if err == nil || !strings.Contains(err.Error(), "exit code 3") {
		t.Errorf("error: %v", err)
	}
	after := entries(t, poolDir("sandboxes"))
	for n := range after {
		if !before[n] {
			if _, err := env.client.GetSandbox(context.Background(), n); err != nil {
				t.Errorf("a failed build left sandbox layer %s", n)
			}
		}
	}
	for n := range entries(t, poolDir()) {
		if strings.HasPrefix(n, ".tmp-build-") {
			t.Errorf("a build left %s in the pool", n)
		}
	}
}

// TestTemplateBuildCopyEscape: copy cannot reach outside the build context
// (SECURITY.md item 30's escapes, for builds).
func TestTemplateBuildCopyEscape(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"ok.txt": "ok"})
	if err := os.Symlink("/etc", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	bctx := tarDir(t, dir)
	name := "itest-esc-" + randHex(3)
	removeTemplate(t, name)
	for _, c := range []struct{ spec, want string }{
		{"from: busybox\nsteps:\n  - copy: ../../etc/passwd /x\n", "leaves the build context"},
		{"from: busybox\nsteps:\n  - copy: /etc/passwd /x\n", "must be relative"},
		{"from: busybox\nsteps:\n  - copy: link/passwd /x\n", "no such file or directory in the build context"},
		{"from: busybox\nsteps:\n  - copy: link/../../../etc/shadow /x\n", "leaves the build context"},
	} {
		_, _, err := buildEvents(t, name, c.spec, bctx)
		if err == nil || !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want %q", c.spec, err, c.want)
		}
	}
	// A context tar with an entry outside it is refused whole.
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	_ = tw.WriteHeader(&tar.Header{Name: "../evil", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	_, _ = tw.Write([]byte("x"))
	_ = tw.Close()
	if _, _, err := buildEvents(t, name, "from: busybox\nsteps:\n  - copy: . /x\n", buf.Bytes()); err == nil || !strings.Contains(err.Error(), "outside it") {
		t.Errorf("context with ../evil: %v", err)
	}
	// The symlink itself is copied as a symlink: it resolves in the sandbox.
	if _, _, err := buildEvents(t, name, "from: busybox\nsteps:\n  - copy: . /ctx\n", bctx); err != nil {
		t.Fatal(err)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	if got := mustSh(t, id, `readlink /ctx/link; cat /ctx/ok.txt; echo; grep -c . /ctx/link/passwd`); got != "/etc\nok\n3" {
		t.Errorf("copied context: %q (want the sandbox's own 3-line /etc/passwd through the link)", got)
	}
}

// TestTemplateStartReady: a template's start command runs in every new
// sandbox and create returns once its readiness check passes; a check
// that cannot pass fails create with the start command's output and
// leaves no sandbox.
func TestTemplateStartReady(t *testing.T) {
	t.Run("cmd", func(t *testing.T) {
		name := "itest-ready-" + randHex(3)
		removeTemplate(t, name)
		spec := "from: busybox\nsteps:\n  - start: sleep 1; echo up > /tmp/ok; exec sleep 1000\n  - ready: {cmd: test -e /tmp/ok, timeout: 20s}\n"
		if _, _, err := buildEvents(t, name, spec, nil); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		id := newSandbox(t, api.CreateSandboxRequest{Template: name})
		t.Logf("create with a 1 s start: %v", time.Since(t0).Round(time.Millisecond))
		if got := mustSh(t, id, `cat /tmp/ok`); got != "up" {
			t.Errorf("ready returned before the start command's file: %q", got)
		}
		procs, err := env.client.ListProcesses(context.Background(), id)
		if err != nil || len(procs) == 0 {
			t.Fatalf("processes: %v %v", procs, err)
		}
		found := false
		for _, p := range procs {
			found = found || (p.Tag == "start" && p.State == api.ProcessRunning)
		}
		if !found {
			t.Errorf("no running process tagged start: %+v", procs)
		}
	})
	t.Run("fails", func(t *testing.T) {
		name := "itest-notready-" + randHex(3)
		removeTemplate(t, name)
		spec := "from: busybox\nsteps:\n  - start: echo cannot-start; exit 4\n  - ready: {port: 8123, timeout: 10s}\n"
		if _, _, err := buildEvents(t, name, spec, nil); err != nil {
			t.Fatal(err)
		}
		before, _ := env.client.ListSandboxes(context.Background(), clientListAll())
		_, err := env.client.CreateSandbox(context.Background(), api.CreateSandboxRequest{Template: name})
		if err == nil || !strings.Contains(err.Error(), "exited (code 4)") || !strings.Contains(err.Error(), "cannot-start") {
			t.Fatalf("create: %v", err)
		}
		after, _ := env.client.ListSandboxes(context.Background(), clientListAll())
		running := func(l []api.Sandbox) int {
			n := 0
			for _, s := range l {
				if s.State == api.StateRunning || s.State == api.StateCreating {
					n++
				}
			}
			return n
		}
		if running(after) > running(before) {
			t.Errorf("a failed create left a sandbox running")
		}
	})
	t.Run("http", func(t *testing.T) {
		needBase(t)
		name := "itest-http-" + randHex(3)
		removeTemplate(t, name)
		spec := `from: base
steps:
  - run: mkdir -p /srv && echo served-by-start > /srv/index.html
  - start: python3 -m http.server 8000 --directory /srv
  - ready: {port: 8000, timeout: 30s}
`
		if _, _, err := buildEvents(t, name, spec, nil); err != nil {
			t.Fatal(err)
		}
		t0 := time.Now()
		id := newSandbox(t, api.CreateSandboxRequest{Template: name})
		t.Logf("create on base with python3 -m http.server ready: %v", time.Since(t0).Round(time.Millisecond))
		// At once, no retry: create waited for the port.
		got := mustSh(t, id, `curl -sS --max-time 5 http://127.0.0.1:8000/index.html`)
		if got != "served-by-start" {
			t.Errorf("http server answered %q", got)
		}
	})
}

// TestTemplateLayerGC: layers are shared between templates built from the
// same steps; removing a template removes only the layers nothing else
// uses; a template that others are built from cannot be removed.
func TestTemplateLayerGC(t *testing.T) {
	a, b, c := "itest-gca-"+randHex(3), "itest-gcb-"+randHex(3), "itest-gcc-"+randHex(3)
	removeTemplate(t, c)
	removeTemplate(t, b)
	removeTemplate(t, a)
	u := randHex(4)
	specA := "from: busybox\nsteps:\n  - run: echo shared-" + u + " > /s\n  - run: echo only-a > /a\n"
	specB := "from: busybox\nsteps:\n  - run: echo shared-" + u + " > /s\n  - run: echo only-b > /b\n"
	ta, _, err := buildEvents(t, a, specA, nil)
	if err != nil {
		t.Fatal(err)
	}
	tb, evs, err := buildEvents(t, b, specB, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ran, cached := stepsRun(evs); len(cached) != 1 || len(ran) != 1 || ta.Layers[1] != tb.Layers[1] {
		t.Fatalf("b reuses a's first layer: ran %v cached %v, layers a %v b %v", ran, cached, ta.Layers, tb.Layers)
	}
	tc, _, err := buildEvents(t, c, "from: "+a+"\nsteps:\n  - run: cat /a /s > /c\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	if tc.From != a+"@1" {
		t.Errorf("c from %q", tc.From)
	}
	// a is c's base: refused.
	if err := env.client.RemoveTemplate(context.Background(), a); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), c+"@1") {
		t.Errorf("rm %s while %s is built on it: %v", a, c, err)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: c})
	if got := mustSh(t, id, `cat /c`); got != "only-a\nshared-"+u {
		t.Errorf("c sees %q", got)
	}
	if err := env.client.DestroySandbox(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := env.client.RemoveTemplate(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(poolDir("layers", tc.Layers[0])); !os.IsNotExist(err) {
		t.Errorf("c's own layer is still there after rm: %v", err)
	}
	if err := env.client.RemoveTemplate(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(poolDir("layers", ta.Layers[0])); !os.IsNotExist(err) {
		t.Errorf("a's own layer is still there after rm: %v", err)
	}
	if _, err := os.Stat(poolDir("layers", ta.Layers[1])); err != nil {
		t.Errorf("the layer b shares was removed with a: %v", err)
	}
	if err := env.client.RemoveTemplate(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	for _, l := range tb.Layers {
		if _, err := os.Stat(poolDir("layers", l)); !os.IsNotExist(err) {
			t.Errorf("layer %s is still there after every template using it went: %v", l, err)
		}
	}
}

// TestTemplateBuildPip: a pip step installs a wheel from the build context
// with --no-index (build sandboxes have no network).
func TestTemplateBuildPip(t *testing.T) {
	needBase(t)
	dir := t.TempDir()
	var whl bytes.Buffer
	zw := zip.NewWriter(&whl)
	for _, f := range []struct{ name, body string }{
		{"abtest/__init__.py", "VALUE = 'from-wheel'\n"},
		{"abtest-1.0.dist-info/METADATA", "Metadata-Version: 2.1\nName: abtest\nVersion: 1.0\n"},
		{"abtest-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nGenerator: agentbox-test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"},
		{"abtest-1.0.dist-info/RECORD", "abtest/__init__.py,,\nabtest-1.0.dist-info/METADATA,,\nabtest-1.0.dist-info/WHEEL,,\nabtest-1.0.dist-info/RECORD,,\n"},
	} {
		w, err := zw.Create(f.name)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = w.Write([]byte(f.body))
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	writeFiles(t, dir, map[string]string{"wheels/abtest-1.0-py3-none-any.whl": whl.String()})
	name := "itest-pip-" + randHex(3)
	removeTemplate(t, name)
	spec := "from: base\nsteps:\n  - copy: wheels /tmp/wheels\n  - pip: [--no-index, /tmp/wheels/abtest-1.0-py3-none-any.whl]\n"
	if _, evs, err := buildEvents(t, name, spec, tarDir(t, dir)); err != nil {
		t.Fatalf("build: %v\n%+v", err, evs)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	if got := mustSh(t, id, `python3 -c 'import abtest; print(abtest.VALUE)'`); got != "from-wheel" {
		t.Errorf("import abtest: %q", got)
	}
}

// TestTemplateBuildFromImage: from: an image file in the build context
// (a docker save archive) becomes the bottom layer, with the image's env,
// workdir and user; it is cached like a step, and collected with the
// template.
func TestTemplateBuildFromImage(t *testing.T) {
	dir := t.TempDir()
	if err := ocitest.WriteDockerArchive(filepath.Join(dir, "app.tar"), busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	spec := "from: app.tar\nsteps:\n  - run: echo on-image > /marker\n    as: root\n"
	writeFiles(t, dir, map[string]string{"spec.yaml": spec})
	name := "itest-fromimg-" + randHex(3)
	removeTemplate(t, name)
	out, errOut, code := cli(t, "", "template", "build", filepath.Join(dir, "spec.yaml"), "--name", name)
	if code != 0 || !strings.HasPrefix(out, name+" 1") || !strings.Contains(errOut, "step 0/1: from image app.tar") {
		t.Fatalf("template build: code %d out %q err %q", code, out, errOut)
	}
	tpl, err := env.client.GetTemplate(context.Background(), name)
	if err != nil || tpl.From != "" || len(tpl.Layers) != 2 || tpl.User != "app" || tpl.Workdir != "/home/app" {
		t.Fatalf("template: %+v %v", tpl, err)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	if got := mustSh(t, id, `cat /marker; id -u; pwd; echo "$GREETING"; ls /opq; test -e /etc/gonefile || echo gone`); got != "on-image\n1000\n/home/app\nfrom-image\nnew\ngone" {
		t.Errorf("sandbox from the image-based build sees:\n%s", got)
	}
	_, evs, err := buildEvents(t, name, spec, tarDir(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	if ran, cached := stepsRun(evs); len(ran) != 0 || len(cached) != 2 {
		t.Errorf("unchanged rebuild from an image: ran %v cached %v", ran, cached)
	}
	if err := env.client.DestroySandbox(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	if err := env.client.RemoveTemplate(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	for _, l := range tpl.Layers {
		if _, err := os.Stat(poolDir("layers", l)); !os.IsNotExist(err) {
			t.Errorf("layer %s is still there after rm: %v", l, err)
		}
	}
}

// TestTemplateBuildGCAtStart: the layers a failed build left as cache (no
// template uses them) go when the daemon starts; a built template's stay,
// and so do the leftovers of an interrupted upload.
func TestTemplateBuildGCAtStart(t *testing.T) {
	name := "itest-gcstart-" + randHex(3)
	removeTemplate(t, name)
	u := randHex(4)
	kept, _, err := buildEvents(t, name, "from: busybox\nsteps:\n  - run: echo kept-"+u+" > /k\n", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, evs, err := buildEvents(t, "itest-gcfail-"+randHex(3), "from: busybox\nsteps:\n  - run: echo cached-"+u+" > /c\n  - run: exit 1\n", nil)
	if err == nil {
		t.Fatal("the failing build succeeded")
	}
	var orphan string
	for _, ev := range evs {
		if ev.Type == api.BuildEventStepDone && ev.Step == 1 {
			orphan = ev.Layer
		}
	}
	if _, err := os.Stat(poolDir("layers", orphan)); orphan == "" || err != nil {
		t.Fatalf("the failed build's first layer %q: %v", orphan, err)
	}
	leftover := poolDir(".tmp-build-" + u)
	restartDaemon(t, func() {
		if err := os.WriteFile(leftover, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	})
	if _, err := os.Stat(poolDir("layers", orphan)); !os.IsNotExist(err) {
		t.Errorf("the unused layer %s is still there after a restart: %v", orphan, err)
	}
	if _, err := os.Stat(poolDir("layers", kept.Layers[0])); err != nil {
		t.Errorf("the built template's layer went at restart: %v", err)
	}
	if _, err := os.Stat(leftover); !os.IsNotExist(err) {
		t.Errorf("%s is still there after a restart: %v", leftover, err)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	if got := mustSh(t, id, `cat /k`); got != "kept-"+u {
		t.Errorf("after the restart the template's sandbox sees %q", got)
	}
}

// TestTemplateBuildNetwork: with network: internet the step sandboxes
// have a veth and a resolv.conf pointing at their resolver; the layer
// keeps the template's own resolv.conf, not the build's.
func TestTemplateBuildNetwork(t *testing.T) {
	probe := `grep -c : /proc/net/dev; cat /etc/resolv.conf 2>/dev/null || echo no-resolv`
	plain := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	want := mustSh(t, plain, probe)
	name := "itest-net-" + randHex(3)
	removeTemplate(t, name)
	spec := "from: busybox\nnetwork: internet\nsteps:\n  - run: |\n      (" + probe + ") > /seen\n"
	if _, _, err := buildEvents(t, name, spec, nil); err != nil {
		t.Fatal(err)
	}
	id := newSandbox(t, api.CreateSandboxRequest{Template: name})
	seen := mustSh(t, id, `cat /seen`)
	if !strings.HasPrefix(seen, "2\n") || !strings.Contains(seen, "Written by agentbox") {
		t.Errorf("the build step saw no veth or no resolver of its own:\n%s", seen)
	}
	if got := mustSh(t, id, probe); got != want {
		t.Errorf("a sandbox of the built template sees\n%s\nwant busybox's own\n%s", got, want)
	}
}
