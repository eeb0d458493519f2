// Package builder runs template builds: each step of a build spec runs in
// a real sandbox and is committed as a read-only layer, cached by the hash
// of its parent layer, the step and the files it copies. See
// docs/templates.md.
package builder

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"runtime"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/build"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// MaxLowers bounds the overlay lowers of a built template (its layers
// plus its base's): the overlay's mount options must fit in a page, and
// sandboxes made from it can still be snapshotted (see sandbox.maxLowers).
const MaxLowers = 32

// Builder runs builds.
type Builder struct {
	Pool  *storage.Pool
	Boxes *sandbox.Service
	Log   *slog.Logger
}

// Request is one build.
type Request struct {
	Name     string
	Spec     *build.Spec
	SpecName string         // shown in the template's source
	Context  *build.Context // nil: no build context
	// Emit receives the build's events as they happen (never "done" or
	// "error": Build returns those).
	Emit func(api.BuildEvent)
}

// StepError is a step that ran and failed.
type StepError struct {
	Step     int
	Text     string
	ExitCode int
	Output   string // its last output
	// Hint says what is likely wrong, when something is: e.g. a package
	// step in a build without network.
	Hint string
}

func (e *StepError) Error() string {
	msg := fmt.Sprintf("build step %d (%s) failed with exit code %d; its last output:\n%s", e.Step, e.Text, e.ExitCode, e.Output)
	if e.Hint != "" {
		msg += "\n" + e.Hint
	}
	return msg
}

// Is makes a StepError an invalid-argument error (the spec is at fault).
func (e *StepError) Is(target error) bool { return target == errdefs.ErrInvalidArgument }

type state struct {
	parent  string // cache key of the layer below (or of the base)
	layers  []string
	env     map[string]string
	user    string
	workdir string
	// mkWorkdir: a workdir step set workdir; step sandboxes create it
	// (a base's own workdir is expected to exist).
	mkWorkdir bool
	start     string
	ready     *api.ReadyCheck
	// limits: the template's user_limits (the base's, then the steps').
	limits *api.UserLimits
}

// Build runs req's steps and publishes the template, for the principal
// ctx carries (internal/tenancy; none: refused); on failure no template
// version is made, and no build sandbox is left. Layers of the steps that
// succeeded stay as cache until garbage-collected.
//
// A cap on ctx (storage.WithMaxBytes: what a tenant's disk quota leaves)
// bounds the new version's layers: a step whose layer takes them past it,
// and a finished build whose layers (cached ones too) hold more, end the
// build with a resource-exhausted error; no version is published.
func (b *Builder) Build(ctx context.Context, req *Request) (*storage.Template, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	if err := storage.ValidTemplateName(req.Name); err != nil {
		return nil, err
	}
	scope := cacheScope(who)
	emit := req.Emit
	if emit == nil {
		emit = func(api.BuildEvent) {}
	}
	spec := req.Spec
	pin, unpin := b.Pool.PinBuildLayers()
	defer unpin()
	var base *storage.Template
	switch name, ver, ok := strings.Cut(spec.From, "@"); {
	case spec.FromImage():
		base, err = b.fromImage(ctx, scope, req, pin, emit)
	case ok: // a tenant builds from public templates and its own (internal/tenancy)
		base, err = b.Pool.TemplateVersionFor(ctx, name, ver)
	default:
		base, err = b.Pool.TemplateFor(ctx, spec.From)
	}
	if err != nil {
		return nil, fmt.Errorf("from %s: %w", spec.From, err)
	}
	baseLowers := base.LowerDirs()
	layered := 0
	for i := range spec.Steps {
		if spec.Steps[i].Layered() {
			layered++
		}
	}
	if len(baseLowers)+layered > MaxLowers {
		return nil, errdefs.Invalid("the build would stack %d layers on %s's %d; at most %d in all: join run steps with &&", layered, spec.From, len(baseLowers), MaxLowers)
	}
	st := &state{
		parent:  "template " + base.Name + "@" + base.Version + " " + base.CreatedAt.UTC().Format(time.RFC3339Nano),
		env:     maps.Clone(base.Env),
		user:    base.User,
		workdir: base.Workdir,
		start:   base.Start,
		ready:   base.Ready,
		limits:  base.UserLimits,
	}
	if st.env == nil {
		st.env = map[string]string{}
	}
	if spec.FromImage() {
		st.parent = base.Layers[0] // the image layer
	}
	for i := range spec.Steps {
		step := &spec.Steps[i]
		t0 := time.Now()
		if !step.Layered() {
			emit(api.BuildEvent{Type: api.BuildEventStep, Step: i + 1, Steps: len(spec.Steps), Text: step.String()})
			applyConfig(st, step)
			emit(api.BuildEvent{Type: api.BuildEventStepDone, Step: i + 1, ExitCode: intp(0), DurationMs: ms(time.Since(t0))})
			continue
		}
		id, plan, err := b.key(scope, st, step, req.Context)
		if err != nil {
			return nil, fmt.Errorf("build step %d (%s): %w", i+1, step.String(), err)
		}
		pin(id)
		if b.Pool.HasBuildLayer(id) {
			emit(api.BuildEvent{Type: api.BuildEventStep, Step: i + 1, Steps: len(spec.Steps), Text: step.String(), Cached: true, Layer: id})
			emit(api.BuildEvent{Type: api.BuildEventStepDone, Step: i + 1, ExitCode: intp(0), DurationMs: ms(time.Since(t0)), Layer: id, Cached: true})
		} else {
			emit(api.BuildEvent{Type: api.BuildEventStep, Step: i + 1, Steps: len(spec.Steps), Text: step.String(), Layer: id})
			lowers := append(b.lowers(st), baseLowers...)
			code, err := b.runStep(ctx, req, st, step, i+1, id, lowers, plan, emit)
			if err != nil {
				ev := api.BuildEvent{Type: api.BuildEventStepDone, Step: i + 1, DurationMs: ms(time.Since(t0))}
				var se *StepError
				if errors.As(err, &se) {
					ev.ExitCode = intp(se.ExitCode)
				}
				emit(ev)
				return nil, err
			}
			emit(api.BuildEvent{Type: api.BuildEventStepDone, Step: i + 1, ExitCode: intp(code), DurationMs: ms(time.Since(t0)), Layer: id})
		}
		st.parent = id
		st.layers = append([]string{id}, st.layers...)
	}
	t := &storage.Template{
		User:    st.user,
		Workdir: st.workdir,
		Env:     st.env,
		Source:  "build " + req.SpecName,
		// A built template keeps its base's user limits, as its env.
		UserLimits: st.limits,
	}
	t.From = base.Name + "@" + base.Version
	t.Layers = st.layers
	if spec.FromImage() {
		// No template below: the image layer is the bottom one.
		t.From, t.Layers = "", append(st.layers, base.Layers...)
	}
	t.Start, t.Ready = st.start, st.ready
	if len(t.Env) == 0 {
		t.Env = nil
	}
	if err := b.checkQuota(ctx, t.Layers, 0); err != nil {
		return nil, err
	}
	out, created, err := b.Pool.SaveBuiltTemplate(ctx, req.Name, t)
	if err != nil {
		return nil, err
	}
	if b.Log != nil {
		b.Log.Info("built template", "template", out.Name, "version", out.Version, "new_version", created, "layers", len(out.Layers))
	}
	return out, nil
}

// fromImage imports the image file spec.From of the build context as a
// build layer (cached by the file's hash) and returns a stand-in base
// template: that layer and the image config's defaults.
func (b *Builder) fromImage(ctx context.Context, scope string, req *Request, pin func(...string), emit func(api.BuildEvent)) (*storage.Template, error) {
	t0 := time.Now()
	f, err := os.CreateTemp(b.Pool.Root(), ".tmp-build-image-")
	if err != nil {
		return nil, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	h := sha256.New()
	if err := req.Context.WriteFile(req.Spec.From, io.MultiWriter(f, h)); err != nil {
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	sum := sha256.Sum256([]byte(scope + "image\n" + hex.EncodeToString(h.Sum(nil))))
	id := hex.EncodeToString(sum[:])[:32]
	pin(id)
	cached := b.Pool.HasBuildLayer(id)
	emit(api.BuildEvent{Type: api.BuildEventStep, Step: 0, Steps: len(req.Spec.Steps), Text: "from image " + req.Spec.From, Cached: cached, Layer: id})
	def, err := b.Pool.ImportImageLayer(ctx, f.Name(), id)
	if err != nil {
		return nil, err
	}
	emit(api.BuildEvent{Type: api.BuildEventStepDone, Step: 0, ExitCode: intp(0), DurationMs: ms(time.Since(t0)), Layer: id, Cached: cached})
	t := &storage.Template{Name: "image", Version: def.Digest, Env: def.Env, User: def.User, Workdir: def.Workdir}
	t.Layers = []string{id}
	t.SetLowers([]string{b.Pool.BuildLayerUpper(id)})
	return t, nil
}

func (b *Builder) lowers(st *state) []string {
	out := make([]string, 0, len(st.layers))
	for _, id := range st.layers {
		out = append(out, b.Pool.BuildLayerUpper(id))
	}
	return out
}

func applyConfig(st *state, step *build.Step) {
	switch step.Kind {
	case build.KindEnv:
		for _, e := range step.Env {
			st.env[e.Name] = e.Value
		}
	case build.KindWorkdir:
		st.workdir, st.mkWorkdir = step.Workdir, true
	case build.KindUser:
		st.user = step.User
	case build.KindStart:
		st.start = step.Start
	case build.KindReady:
		st.ready = &api.ReadyCheck{Cmd: step.Ready.Cmd, Port: step.Ready.Port, TimeoutMs: step.Ready.Timeout.Milliseconds()}
	case build.KindUserLimits:
		l := api.UserLimits{}.Over(st.limits).Over(step.UserLimits)
		st.limits = &l
	}
}

// cacheScope keeps tenants' build caches apart: a tenant's steps never
// reuse (or reveal, by a cache hit) another tenant's layers; the admin's
// scope is "".
func cacheScope(p tenancy.Principal) string {
	if !p.Admin {
		return "tenant " + p.Tenant
	}
	return ""
}

// checkQuota returns a resource-exhausted error when the layers (build
// layer ids) plus extra bytes hold more than the cap on ctx
// (storage.WithMaxBytes), and nil when there is no cap.
func (b *Builder) checkQuota(ctx context.Context, layers []string, extra int64) error {
	limit := storage.MaxBytesFrom(ctx)
	if limit <= 0 {
		return nil
	}
	used := extra
	for _, id := range layers {
		used += b.Pool.BuildLayerSize(id)
	}
	if used > limit {
		return errdefs.Exhausted("the build's layers hold %d bytes, past the %d bytes the tenant's disk_mb quota leaves for templates; remove templates or sandboxes, or ask an admin to raise the quota", used, limit)
	}
	return nil
}

// key is a layered step's cache key: the hash of the cache scope, its
// parent, the step, the env, user and workdir it runs with, and (copy)
// the files it copies.
func (b *Builder) key(scope string, st *state, step *build.Step, bc *build.Context) (string, *build.CopyPlan, error) {
	h := sha256.New()
	var plan *build.CopyPlan
	copyHash := ""
	if step.Kind == build.KindCopy {
		var err error
		if plan, err = bc.Plan(step.Copy, step.Copy.ToDir); err != nil {
			return "", nil, err
		}
		ch := sha256.New()
		if err := bc.WriteTar(plan, ch, true); err != nil {
			return "", nil, err
		}
		copyHash = hex.EncodeToString(ch.Sum(nil))
	}
	k, _ := json.Marshal(struct {
		Scope    string            `json:"scope,omitempty"`
		Parent   string            `json:"parent"`
		Kind     string            `json:"kind"`
		Run      string            `json:"run,omitempty"`
		As       string            `json:"as,omitempty"`
		Copy     *build.Copy       `json:"copy,omitempty"`
		Packages []string          `json:"packages,omitempty"`
		Env      map[string]string `json:"env"`
		User     string            `json:"user"`
		Workdir  string            `json:"workdir"`
		Files    string            `json:"files,omitempty"`
	}{scope, st.parent, step.Kind, step.Run, step.As, step.Copy, step.Packages, st.env, st.user, st.workdir, copyHash})
	h.Write(k)
	return hex.EncodeToString(h.Sum(nil))[:32], plan, nil
}

// stepSlots bounds the build steps that run at once, whatever the number
// of builds: each has a sandbox with the daemon's largest limits.
var stepSlots = make(chan struct{}, max(2, runtime.NumCPU()))

// runStep runs a layered step in a fresh build sandbox and commits its
// writable layer as layer id.
func (b *Builder) runStep(ctx context.Context, req *Request, st *state, step *build.Step, num int, id string, lowers []string, plan *build.CopyPlan, emit func(api.BuildEvent)) (int, error) {
	select {
	case stepSlots <- struct{}{}:
	case <-ctx.Done():
		return -1, ctx.Err()
	}
	defer func() { <-stepSlots }()
	box, err := b.Boxes.NewBuildBox(ctx, lowers, st.env, st.user, req.Spec.Network)
	if err != nil {
		return -1, err
	}
	defer func() {
		if err := box.Close(); err != nil && b.Log != nil {
			b.Log.Warn("removing build sandbox", "sandbox", box.ID(), "err", err)
		}
	}()
	lines := &lineSplitter{emit: func(stream, line string) {
		emit(api.BuildEvent{Type: api.BuildEventOutput, Step: num, Stream: stream, Text: line})
	}}
	run := func(pr api.StartProcessRequest) (int, error) {
		if pr.TimeoutMs == 0 {
			pr.TimeoutMs = build.DefaultTimeout.Milliseconds()
		}
		code, err := box.Run(ctx, pr, lines.write)
		lines.flush()
		return code, err
	}
	fail := func(code int) (int, error) {
		se := &StepError{Step: num, Text: step.String(), ExitCode: code, Output: lines.tail()}
		switch {
		case (step.Kind == build.KindApt || step.Kind == build.KindPip || step.Kind == build.KindNpm) && req.Spec.Network != "internet":
			se.Hint = fmt.Sprintf("hint: this build's network is %q, so a %s step cannot fetch packages; put `network: internet` at the top of the spec", orNone(req.Spec.Network), step.Kind)
		}
		return code, se
	}
	if st.mkWorkdir {
		code, err := run(api.StartProcessRequest{Cmd: []string{"mkdir", "-p", st.workdir}, User: "root"})
		if err != nil {
			return -1, err
		}
		if code != 0 {
			return fail(code)
		}
	}
	var pr *api.StartProcessRequest
	switch step.Kind {
	case build.KindRun:
		pr = &api.StartProcessRequest{Cmd: []string{"/bin/sh", "-c", step.Run}, User: step.As, Cwd: st.workdir}
	case build.KindApt:
		pr = &api.StartProcessRequest{Cmd: append([]string{"/bin/sh", "-c",
			`set -e; export DEBIAN_FRONTEND=noninteractive; apt-get update; apt-get install -y --no-install-recommends "$@"; rm -rf /var/lib/apt/lists/*`, "apt"},
			step.Packages...), User: "root", Cwd: st.workdir}
	case build.KindPip:
		pr = &api.StartProcessRequest{Cmd: append([]string{"python3", "-m", "pip", "install", "--no-cache-dir"}, step.Packages...),
			User: step.As, Cwd: st.workdir, Env: map[string]string{"PIP_BREAK_SYSTEM_PACKAGES": "1", "PIP_DISABLE_PIP_VERSION_CHECK": "1"}}
	case build.KindNpm:
		pr = &api.StartProcessRequest{Cmd: append([]string{"npm", "install", "-g"}, step.Packages...), User: step.As, Cwd: st.workdir}
	case build.KindCopy:
		owner := step.Copy.Chown
		if owner == "" {
			owner = "root"
		}
		pr2, pw := io.Pipe()
		go func() { pw.CloseWithError(req.Context.WriteTar(plan, pw, false)) }()
		err := box.PutArchive(ctx, plan.Dir(), owner, pr2)
		pr2.CloseWithError(io.ErrClosedPipe)
		if err != nil {
			lines.emit("stderr", err.Error())
			lines.last.WriteString(err.Error())
			return fail(1)
		}
	}
	if pr != nil {
		code, err := run(*pr)
		if err != nil {
			return -1, err
		}
		if code != 0 {
			return fail(code)
		}
	}
	if err := box.Stop(); err != nil {
		return -1, fmt.Errorf("stopping the build sandbox: %w", err)
	}
	meta := storage.LayerMeta{ID: id, Parent: st.parent, Step: step.String(), CreatedAt: time.Now().UTC()}
	if err := b.Pool.CommitBuildLayer(ctx, box.ID(), meta); err != nil {
		return -1, err
	}
	// A tenant's build stops at the first layer that takes it past its
	// quota (the committed snapshot's size is exact; the layer is then
	// unused cache, which the template service collects).
	if err := b.checkQuota(ctx, append([]string{id}, st.layers...), 0); err != nil {
		return -1, fmt.Errorf("build step %d (%s): %w", num, step.String(), err)
	}
	return 0, nil
}

func intp(i int) *int { return &i }

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// lineSplitter turns output chunks into lines, keeping the last 4 KiB.
type lineSplitter struct {
	emit    func(stream, line string)
	partial map[string]*bytes.Buffer
	last    bytes.Buffer
}

const maxLine = 8 << 10

func (l *lineSplitter) write(stream string, data []byte) {
	if l.partial == nil {
		l.partial = map[string]*bytes.Buffer{}
	}
	l.last.Write(data)
	if l.last.Len() > 8<<10 {
		b := append([]byte(nil), l.last.Bytes()[l.last.Len()-4<<10:]...)
		l.last.Reset()
		l.last.Write(b)
	}
	buf := l.partial[stream]
	if buf == nil {
		buf = &bytes.Buffer{}
		l.partial[stream] = buf
	}
	buf.Write(data)
	for {
		i := bytes.IndexByte(buf.Bytes(), '\n')
		if i < 0 {
			if buf.Len() >= maxLine {
				l.emit(stream, buf.String())
				buf.Reset()
			}
			return
		}
		l.emit(stream, strings.TrimSuffix(string(buf.Next(i + 1)[:i]), "\r"))
	}
}

func (l *lineSplitter) flush() {
	for stream, buf := range l.partial {
		if buf.Len() > 0 {
			l.emit(stream, buf.String())
			buf.Reset()
		}
	}
}

func (l *lineSplitter) tail() string {
	s := l.last.String()
	if len(s) > 4<<10 {
		s = "..." + s[len(s)-4<<10:]
	}
	return strings.TrimRight(s, "\n")
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
