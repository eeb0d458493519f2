package build

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

const fullSpec = `# every kind of step
from: base
network: internet
steps:
  - run: echo one > /one
  - run: |
      id -un > /who
    as: nobody
  - copy: app /srv/app
  - copy: {src: conf/app.ini, dest: /etc/app/, chown: "1000:1000"}
  - env: {GREETING: hello, PORT: "8000"}
  - workdir: /srv/app
  - user: "1000"
  - apt: [curl, git]
  - pip: [--no-index, ./wheels/x.whl]
  - npm: typescript
  - start: python3 -m http.server $PORT
  - ready: {port: 8000, timeout: 20s}
`

func TestParseFull(t *testing.T) {
	s, err := Parse([]byte(fullSpec))
	if err != nil {
		t.Fatal(err)
	}
	if s.From != "base" || len(s.Steps) != 12 || s.Network != "internet" {
		t.Fatalf("from %q, %d steps", s.From, len(s.Steps))
	}
	want := []string{KindRun, KindRun, KindCopy, KindCopy, KindEnv, KindWorkdir, KindUser, KindApt, KindPip, KindNpm, KindStart, KindReady}
	for i, k := range want {
		if s.Steps[i].Kind != k {
			t.Errorf("step %d: kind %s, want %s", i+1, s.Steps[i].Kind, k)
		}
	}
	if s.Steps[1].As != "nobody" || s.Steps[1].Line != 6 {
		t.Errorf("step 2: as %q line %d", s.Steps[1].As, s.Steps[1].Line)
	}
	if c := s.Steps[2].Copy; c.Src != "app" || c.Dest != "/srv/app" || c.ToDir {
		t.Errorf("copy short form: %+v", c)
	}
	if c := s.Steps[3].Copy; c.Src != "conf/app.ini" || c.Dest != "/etc/app" || !c.ToDir || c.Chown != "1000:1000" {
		t.Errorf("copy mapping: %+v", c)
	}
	if e := s.Steps[4].Env; len(e) != 2 || e[0] != (EnvVar{"GREETING", "hello"}) || e[1] != (EnvVar{"PORT", "8000"}) {
		t.Errorf("env: %+v", e)
	}
	if p := s.Steps[8].Packages; len(p) != 2 || p[0] != "--no-index" {
		t.Errorf("pip: %v", p)
	}
	if p := s.Steps[9].Packages; len(p) != 1 || p[0] != "typescript" {
		t.Errorf("npm: %v", p)
	}
	if r := s.Steps[11].Ready; r.Port != 8000 || r.Timeout != 20*time.Second {
		t.Errorf("ready: %+v", r)
	}
	n := 0
	for _, st := range s.Steps {
		if st.Layered() {
			n++
		}
	}
	if n != 7 {
		t.Errorf("%d layered steps, want 7", n)
	}
}

func TestParseUserLimits(t *testing.T) {
	s, err := Parse([]byte("from: base\nsteps:\n  - user_limits: {inotify_watches: 524288, msgqueue_bytes: 4096}\n"))
	if err != nil {
		t.Fatal(err)
	}
	got := s.Steps[0]
	if got.Kind != KindUserLimits || got.Layered() || *got.UserLimits != (api.UserLimits{InotifyWatches: 524288, MsgqueueBytes: 4096}) {
		t.Errorf("step %+v, limits %+v", got, got.UserLimits)
	}
}

func TestParseErrors(t *testing.T) {
	cases := []struct{ name, spec, want string }{
		{"empty", "", "empty"},
		{"not yaml", "from: [", "not valid YAML"},
		{"unknown top key", "from: base\nsteps: []\nform: x\n", `line 3: unknown key "form"`},
		{"unknown step key", "from: base\nsteps:\n  - runn: x\n", `line 3: unknown key "runn"`},
		{"two kinds", "from: base\nsteps:\n  - run: a\n    copy: a /a\n", "line 4: step 1 has both run and copy"},
		{"no kind", "from: base\nsteps:\n  - as: root\n", "step 1 has no kind"},
		{"as on copy", "from: base\nsteps:\n  - copy: a /a\n    as: root\n", "as applies to run"},
		{"missing from", "steps: []\n", "from is missing"},
		{"network", "from: base\nnetwork: host\nsteps: []\n", "network must be none or internet"},
		{"missing steps", "from: base\n", "steps is missing"},
		{"bad from", "from: Bad Name\nsteps: []\n", "neither a template name"},
		{"copy escape", "from: base\nsteps:\n  - copy: ../etc/passwd /x\n", "leaves the build context"},
		{"copy absolute", "from: base\nsteps:\n  - copy: /etc/passwd /x\n", "must be relative"},
		{"copy relative dest", "from: base\nsteps:\n  - copy: a b\n", "dest must be an absolute path"},
		{"env name", "from: base\nsteps:\n  - env: {1A: x}\n", "env name"},
		{"workdir relative", "from: base\nsteps:\n  - workdir: app\n", "absolute"},
		{"ready both", "from: base\nsteps:\n  - ready: {port: 80, cmd: x}\n", "exactly one of cmd and port"},
		{"ready port", "from: base\nsteps:\n  - ready: 70000\n", "between 1 and 65535"},
		{"ready timeout", "from: base\nsteps:\n  - ready: {port: 80, timeout: 1h}\n", "ready timeout"},
		{"two starts", "from: base\nsteps:\n  - start: a\n  - start: b\n", "second start"},
		{"duplicate key", "from: base\nfrom: busybox\nsteps: []\n", `line 2: key "from" given twice`},
		{"alias", "from: &a base\nsteps:\n  - run: *a\n", "aliases"},
		{"package space", "from: base\nsteps:\n  - apt: [\"a b\"]\n", "not a package name"},
		{"steps scalar", "from: base\nsteps: run\n", "steps must be a list"},
		{"two docs", "from: base\nsteps: []\n---\nfrom: x\n", "second YAML document"},
		{"user_limits unknown", "from: base\nsteps:\n  - user_limits: {inotify: 5}\n", `unknown key "inotify"`},
		{"user_limits text", "from: base\nsteps:\n  - user_limits: {sigpending: lots}\n", "sigpending must be a positive whole number"},
		{"user_limits range", "from: base\nsteps:\n  - user_limits: {inotify_watches: 99999999}\n", "user_limits.inotify_watches must be between 1 and 1048576"},
		{"user_limits scalar", "from: base\nsteps:\n  - user_limits: 5\n", "user_limits must be a mapping"},
		{"too many layers", "from: base\nsteps:\n" + strings.Repeat("  - run: x\n", MaxLayerSteps+1), "join run steps"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(c.spec))
			if err == nil {
				t.Fatalf("accepted:\n%s", c.spec)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("error class: %v", err)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("error %q does not say %q", err, c.want)
			}
		})
	}
}

// FuzzParseBuildSpec: Parse never panics, and what it accepts is
// consistent (a kind per step, copy paths inside the context).
func FuzzParseBuildSpec(f *testing.F) {
	f.Add([]byte(fullSpec))
	f.Add([]byte("from: busybox\nsteps: []\n"))
	f.Add([]byte("from: x\nsteps:\n  - copy: {src: ., dest: /}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			return
		}
		if s.From == "" {
			t.Fatal("accepted a spec without from")
		}
		for _, st := range s.Steps {
			if st.Kind == "" {
				t.Fatal("accepted a step without a kind")
			}
			if st.Kind == KindCopy {
				if _, err := cleanRel(st.Copy.Src); err != nil || strings.HasPrefix(st.Copy.Src, "/") {
					t.Fatalf("accepted copy src %q", st.Copy.Src)
				}
			}
			_ = st.String()
		}
	})
}
