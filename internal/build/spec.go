// Package build reads template builds: the build spec (YAML) and the
// build context, the files its copy steps take. It is what the CLI needs
// of a build (which files to send) and imports nothing of the daemon; the
// build itself runs in package builder. See docs/templates.md.
package build

import (
	"bytes"
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Limits of a spec.
const (
	MaxSpecBytes   = 1 << 20
	MaxSteps       = 200
	MaxLayerSteps  = 24 // run, copy, apt, pip and npm steps: each is an overlay lower
	DefaultReady   = 30 * time.Second
	MaxReady       = 10 * time.Minute
	DefaultTimeout = 30 * time.Minute // per step
)

// Step kinds.
const (
	KindRun     = "run"
	KindCopy    = "copy"
	KindEnv     = "env"
	KindWorkdir = "workdir"
	KindUser    = "user"
	KindApt     = "apt"
	KindPip     = "pip"
	KindNpm     = "npm"
	KindStart   = "start"
	KindReady   = "ready"
	// KindUserLimits sets fields of the sandboxes' per-user kernel
	// counts (api.UserLimits), e.g. `user_limits: {inotify_watches: 524288}`.
	KindUserLimits = "user_limits"
)

var stepKinds = []string{KindRun, KindCopy, KindEnv, KindWorkdir, KindUser, KindApt, KindPip, KindNpm, KindStart, KindReady, KindUserLimits}

// Spec is a parsed build spec.
type Spec struct {
	// From is a template name (optionally NAME@VERSION) or, when it
	// contains a '/' or ends in .tar, .tar.gz or .tgz, an image archive in
	// the build context.
	From  string
	Steps []Step
	// Network is the egress of the step sandboxes: "none" (default) or
	// "internet" (for apt, pip and npm steps that fetch packages).
	Network string
}

// FromImage reports whether From names an image file rather than a template.
func (s *Spec) FromImage() bool { return isImageRef(s.From) }

func isImageRef(from string) bool {
	return strings.Contains(from, "/") || strings.HasSuffix(from, ".tar") ||
		strings.HasSuffix(from, ".tar.gz") || strings.HasSuffix(from, ".tgz")
}

// Step is one step of a spec. Kind says which of the fields is set.
type Step struct {
	Line int    // where the step starts in the spec
	Kind string // one of the Kind constants

	Run string // run: a shell command (sh -c)
	As  string // run, pip, npm: the user to run as ("" = the current user)

	Copy *Copy // copy

	Env      []EnvVar // env: in the spec's order
	Workdir  string   // workdir
	User     string   // user
	Packages []string // apt, pip, npm: packages (and, for pip/npm, options)

	Start string // start: a shell command started in every new sandbox
	Ready *Ready // ready

	UserLimits *api.UserLimits // user_limits: the fields it sets
}

// Copy copies Src (a file or directory of the build context, relative to
// its root) to Dest in the sandbox.
type Copy struct {
	Src   string `json:"src"`
	Dest  string `json:"dest"`
	Chown string `json:"chown,omitempty"` // USER or UID[:GID]; default root
	// ToDir: dest ended in '/', so a file source goes into it by its name.
	ToDir bool `json:"to_dir,omitempty"`
}

// EnvVar is one env assignment.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Ready is a readiness check: Cmd exits 0, or Port accepts a TCP
// connection inside the sandbox, within Timeout.
type Ready struct {
	Cmd     string        `json:"cmd,omitempty"`
	Port    int           `json:"port,omitempty"`
	Timeout time.Duration `json:"timeout"`
}

// Layered reports whether the step makes a layer (runs in a sandbox).
func (s *Step) Layered() bool {
	switch s.Kind {
	case KindRun, KindCopy, KindApt, KindPip, KindNpm:
		return true
	}
	return false
}

// String is a one-line description of the step for progress output.
func (s *Step) String() string {
	switch s.Kind {
	case KindRun:
		if s.As != "" {
			return "run (as " + s.As + "): " + oneLine(s.Run)
		}
		return "run: " + oneLine(s.Run)
	case KindCopy:
		return "copy " + s.Copy.Src + " -> " + s.Copy.Dest
	case KindEnv:
		var b []string
		for _, e := range s.Env {
			b = append(b, e.Name+"="+e.Value)
		}
		return "env " + strings.Join(b, " ")
	case KindWorkdir:
		return "workdir " + s.Workdir
	case KindUser:
		return "user " + s.User
	case KindApt, KindPip, KindNpm:
		return s.Kind + " " + strings.Join(s.Packages, " ")
	case KindStart:
		return "start: " + oneLine(s.Start)
	case KindReady:
		if s.Ready.Port != 0 {
			return fmt.Sprintf("ready: port %d within %v", s.Ready.Port, s.Ready.Timeout)
		}
		return fmt.Sprintf("ready: %s within %v", oneLine(s.Ready.Cmd), s.Ready.Timeout)
	case KindUserLimits:
		l := s.UserLimits
		return fmt.Sprintf("user_limits: inotify_instances=%d inotify_watches=%d msgqueue_bytes=%d sigpending=%d (0: unchanged)",
			l.InotifyInstances, l.InotifyWatches, l.MsgqueueBytes, l.Sigpending)
	}
	return s.Kind
}

func oneLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		s = s[:i] + " ..."
	}
	if len(s) > 120 {
		s = s[:117] + "..."
	}
	return s
}

// The patterns compile on first use: the CLI links this package for
// every command and parses a spec for one.
var (
	envNameRE    = lazyRE(`^[A-Za-z_][A-Za-z0-9_]*$`)
	userRE       = lazyRE(`^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?$`)
	templateRE   = lazyRE(`^[a-z0-9][a-z0-9._-]{0,62}(@[1-9][0-9]{0,8})?$`)
	packageBadRE = lazyRE(`[\x00-\x1f\x7f]`)
)

func lazyRE(expr string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(expr) })
}

func errAt(line int, format string, args ...any) error {
	return errdefs.Invalid("build spec line %d: %s", line, fmt.Sprintf(format, args...))
}

// Parse reads a build spec. Unknown keys, a step with no or two kinds,
// and bad values are refused with the line they are on.
func Parse(data []byte) (*Spec, error) {
	if len(data) > MaxSpecBytes {
		return nil, errdefs.Invalid("build spec is %d bytes; the most is %d", len(data), MaxSpecBytes)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return nil, errdefs.Invalid("build spec is empty: it needs at least `from:` and `steps:`")
	}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		return nil, errdefs.Invalid("build spec is not valid YAML: %v", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); err == nil {
		return nil, errAt(extra.Line, "a second YAML document; a spec is one document")
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 {
		return nil, errdefs.Invalid("build spec must be one YAML mapping with from: and steps:")
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, errAt(root.Line, "the spec must be a mapping with from: and steps:, got %s", kindName(root))
	}
	spec := &Spec{}
	var haveSteps bool
	err := eachPair(root, []string{"from", "network", "steps"}, func(key string, k, v *yaml.Node) error {
		switch key {
		case "network":
			s, err := scalar(v, "network")
			if err != nil {
				return err
			}
			if s != "none" && s != "internet" {
				return errAt(v.Line, "network must be none or internet, got %q", s)
			}
			spec.Network = s
		case "from":
			s, err := scalar(v, "from")
			if err != nil {
				return err
			}
			if s == "" {
				return errAt(v.Line, "from is empty: name a template (like base) or an image file in the build context")
			}
			if !isImageRef(s) && !templateRE().MatchString(s) {
				return errAt(v.Line, "from %q is neither a template name (NAME or NAME@VERSION) nor an image file (a path with '/' or ending in .tar, .tar.gz, .tgz)", s)
			}
			if isImageRef(s) {
				if _, err := cleanRel(s); err != nil {
					return errAt(v.Line, "from %q: %v", s, err)
				}
			}
			spec.From = s
		case "steps":
			haveSteps = true
			if v.Kind != yaml.SequenceNode {
				return errAt(v.Line, "steps must be a list, got %s", kindName(v))
			}
			if len(v.Content) > MaxSteps {
				return errAt(v.Line, "%d steps; the most is %d", len(v.Content), MaxSteps)
			}
			for i, sn := range v.Content {
				st, err := parseStep(sn, i+1)
				if err != nil {
					return err
				}
				spec.Steps = append(spec.Steps, *st)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if spec.From == "" {
		return nil, errAt(root.Line, "from is missing: name the template (like base) or the image file to start from")
	}
	if !haveSteps {
		return nil, errAt(root.Line, "steps is missing: list the steps (it may be empty: steps: [])")
	}
	layered, starts, readies := 0, 0, 0
	for i := range spec.Steps {
		switch st := &spec.Steps[i]; {
		case st.Layered():
			layered++
		case st.Kind == KindStart:
			starts++
			if starts > 1 {
				return nil, errAt(st.Line, "a second start step; a template has one start command")
			}
		case st.Kind == KindReady:
			readies++
			if readies > 1 {
				return nil, errAt(st.Line, "a second ready step; a template has one readiness check")
			}
		}
	}
	if layered > MaxLayerSteps {
		return nil, errdefs.Invalid("build spec has %d run/copy/apt/pip/npm steps; the most is %d (each is an overlay layer): join run steps with &&", layered, MaxLayerSteps)
	}
	return spec, nil
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return "a scalar"
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

// eachPair calls fn for each key of mapping m, refusing keys not in known
// and duplicates.
func eachPair(m *yaml.Node, known []string, fn func(key string, k, v *yaml.Node) error) error {
	seen := map[string]bool{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if k.Kind != yaml.ScalarNode {
			return errAt(k.Line, "keys must be plain names")
		}
		key := k.Value
		if !contains(known, key) {
			return errAt(k.Line, "unknown key %q; known here: %s", key, strings.Join(known, ", "))
		}
		if seen[key] {
			return errAt(k.Line, "key %q given twice", key)
		}
		seen[key] = true
		if v.Kind == yaml.AliasNode {
			return errAt(v.Line, "YAML aliases are not allowed in a build spec")
		}
		if err := fn(key, k, v); err != nil {
			return err
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func scalar(v *yaml.Node, what string) (string, error) {
	if v.Kind != yaml.ScalarNode {
		return "", errAt(v.Line, "%s must be a string, got %s", what, kindName(v))
	}
	if v.Tag == "!!null" {
		return "", nil
	}
	if strings.IndexByte(v.Value, 0) >= 0 {
		return "", errAt(v.Line, "%s contains a NUL byte", what)
	}
	return v.Value, nil
}

func stringList(v *yaml.Node, what string) ([]string, error) {
	if v.Kind == yaml.ScalarNode && v.Tag != "!!null" {
		// "apt: curl git" is accepted as a list split at spaces.
		f := strings.Fields(v.Value)
		if len(f) == 0 {
			return nil, errAt(v.Line, "%s lists no packages", what)
		}
		v = &yaml.Node{Kind: yaml.SequenceNode, Line: v.Line}
		for _, s := range f {
			v.Content = append(v.Content, &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s, Line: v.Line})
		}
	}
	if v.Kind != yaml.SequenceNode {
		return nil, errAt(v.Line, "%s must be a list of packages, got %s", what, kindName(v))
	}
	if len(v.Content) == 0 {
		return nil, errAt(v.Line, "%s lists no packages", what)
	}
	var out []string
	for _, n := range v.Content {
		s, err := scalar(n, what+" entry")
		if err != nil {
			return nil, err
		}
		if s == "" || packageBadRE().MatchString(s) || strings.ContainsAny(s, " \t") {
			return nil, errAt(n.Line, "%s entry %q is not a package name: no spaces or control characters", what, s)
		}
		out = append(out, s)
	}
	return out, nil
}

func parseStep(n *yaml.Node, num int) (*Step, error) {
	if n.Kind != yaml.MappingNode {
		return nil, errAt(n.Line, "step %d must be a mapping like `- run: make`, got %s", num, kindName(n))
	}
	st := &Step{Line: n.Line}
	known := append(append([]string{}, stepKinds...), "as")
	var asLine int
	err := eachPair(n, known, func(key string, k, v *yaml.Node) error {
		if key == "as" {
			s, err := scalar(v, "as")
			if err != nil {
				return err
			}
			if !userRE().MatchString(s) {
				return errAt(v.Line, "as %q is not a user name or uid", s)
			}
			st.As, asLine = s, k.Line
			return nil
		}
		if st.Kind != "" {
			return errAt(k.Line, "step %d has both %s and %s: one kind per step (start a new `- ` item)", num, st.Kind, key)
		}
		st.Kind = key
		switch key {
		case KindRun:
			s, err := scalar(v, "run")
			if err != nil {
				return err
			}
			if strings.TrimSpace(s) == "" {
				return errAt(v.Line, "run is empty")
			}
			st.Run = s
		case KindCopy:
			c, err := parseCopy(v)
			if err != nil {
				return err
			}
			st.Copy = c
		case KindEnv:
			if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
				return errAt(v.Line, "env must be a mapping of NAME: value")
			}
			seen := map[string]bool{}
			for i := 0; i+1 < len(v.Content); i += 2 {
				kn, vn := v.Content[i], v.Content[i+1]
				name, err := scalar(kn, "env name")
				if err != nil {
					return err
				}
				if !envNameRE().MatchString(name) {
					return errAt(kn.Line, "env name %q is not valid: letters, digits and _, not starting with a digit", name)
				}
				if seen[name] {
					return errAt(kn.Line, "env %s given twice", name)
				}
				seen[name] = true
				val, err := scalar(vn, "env "+name)
				if err != nil {
					return err
				}
				st.Env = append(st.Env, EnvVar{Name: name, Value: val})
			}
		case KindWorkdir:
			s, err := scalar(v, "workdir")
			if err != nil {
				return err
			}
			if !path.IsAbs(s) {
				return errAt(v.Line, "workdir must be an absolute path, got %q", s)
			}
			st.Workdir = path.Clean(s)
		case KindUser:
			s, err := scalar(v, "user")
			if err != nil {
				return err
			}
			if !userRE().MatchString(s) {
				return errAt(v.Line, "user %q is not a user name or uid (NAME, UID or UID:GID)", s)
			}
			st.User = s
		case KindApt, KindPip, KindNpm:
			p, err := stringList(v, key)
			if err != nil {
				return err
			}
			st.Packages = p
		case KindStart:
			s, err := scalar(v, "start")
			if err != nil {
				return err
			}
			if strings.TrimSpace(s) == "" {
				return errAt(v.Line, "start is empty")
			}
			st.Start = s
		case KindReady:
			r, err := parseReady(v)
			if err != nil {
				return err
			}
			st.Ready = r
		case KindUserLimits:
			l, err := parseUserLimits(v)
			if err != nil {
				return err
			}
			st.UserLimits = l
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if st.Kind == "" {
		return nil, errAt(n.Line, "step %d has no kind: use one of %s", num, strings.Join(stepKinds, ", "))
	}
	if st.As != "" && st.Kind != KindRun && st.Kind != KindPip && st.Kind != KindNpm {
		return nil, errAt(asLine, "as applies to run, pip and npm steps, not %s", st.Kind)
	}
	return st, nil
}

func parseCopy(v *yaml.Node) (*Copy, error) {
	c := &Copy{}
	switch v.Kind {
	case yaml.ScalarNode:
		f := strings.Fields(v.Value)
		if len(f) != 2 {
			return nil, errAt(v.Line, "copy takes `SRC DEST` or a mapping with src and dest, got %q", v.Value)
		}
		c.Src, c.Dest = f[0], f[1]
	case yaml.MappingNode:
		err := eachPair(v, []string{"src", "dest", "chown"}, func(key string, k, vv *yaml.Node) error {
			s, err := scalar(vv, "copy "+key)
			if err != nil {
				return err
			}
			switch key {
			case "src":
				c.Src = s
			case "dest":
				c.Dest = s
			case "chown":
				if !userRE().MatchString(s) {
					return errAt(vv.Line, "copy chown %q is not a user or USER:GROUP", s)
				}
				c.Chown = s
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	default:
		return nil, errAt(v.Line, "copy must be `SRC DEST` or a mapping with src and dest, got %s", kindName(v))
	}
	if c.Src == "" || c.Dest == "" {
		return nil, errAt(v.Line, "copy needs both src and dest")
	}
	src, err := cleanRel(c.Src)
	if err != nil {
		return nil, errAt(v.Line, "copy src %q: %v", c.Src, err)
	}
	c.Src = src
	if !path.IsAbs(c.Dest) {
		return nil, errAt(v.Line, "copy dest must be an absolute path in the sandbox, got %q", c.Dest)
	}
	c.ToDir = strings.HasSuffix(c.Dest, "/")
	c.Dest = path.Clean(c.Dest)
	return c, nil
}

// cleanRel cleans a path inside the build context: relative, with no ".."
// that leaves it. "." is the whole context.
func cleanRel(p string) (string, error) {
	if path.IsAbs(p) {
		return "", fmt.Errorf("must be relative to the build context, not absolute")
	}
	c := path.Clean(p)
	if c == ".." || strings.HasPrefix(c, "../") {
		return "", fmt.Errorf("leaves the build context")
	}
	return c, nil
}

// parseUserLimits reads `user_limits: {NAME: N, ...}`.
func parseUserLimits(v *yaml.Node) (*api.UserLimits, error) {
	names := []string{"inotify_instances", "inotify_watches", "msgqueue_bytes", "sigpending"}
	if v.Kind != yaml.MappingNode || len(v.Content) == 0 {
		return nil, errAt(v.Line, "user_limits must be a mapping of %s to numbers", strings.Join(names, ", "))
	}
	l := &api.UserLimits{}
	err := eachPair(v, names, func(key string, _, vv *yaml.Node) error {
		s, err := scalar(vv, "user_limits "+key)
		if err != nil {
			return err
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil || n <= 0 {
			return errAt(vv.Line, "user_limits %s must be a positive whole number, got %q", key, s)
		}
		return l.SetUserLimit(key, n)
	})
	if err != nil {
		return nil, err
	}
	if err := l.Check("user_limits"); err != nil {
		return nil, errAt(v.Line, "%v", err)
	}
	return l, nil
}

func parseReady(v *yaml.Node) (*Ready, error) {
	r := &Ready{Timeout: DefaultReady}
	if v.Kind == yaml.ScalarNode {
		// ready: 8000 (a port)
		p, err := strconv.Atoi(v.Value)
		if err != nil {
			return nil, errAt(v.Line, "ready takes a port number or a mapping with cmd or port (and timeout), got %q", v.Value)
		}
		r.Port = p
	} else if v.Kind == yaml.MappingNode {
		err := eachPair(v, []string{"cmd", "port", "timeout"}, func(key string, k, vv *yaml.Node) error {
			s, err := scalar(vv, "ready "+key)
			if err != nil {
				return err
			}
			switch key {
			case "cmd":
				if strings.TrimSpace(s) == "" {
					return errAt(vv.Line, "ready cmd is empty")
				}
				r.Cmd = s
			case "port":
				p, err := strconv.Atoi(s)
				if err != nil {
					return errAt(vv.Line, "ready port must be a number, got %q", s)
				}
				r.Port = p
				if p == 0 {
					r.Port = -1
				}
			case "timeout":
				d, err := time.ParseDuration(s)
				if err != nil {
					if n, nerr := strconv.Atoi(s); nerr == nil {
						d, err = time.Duration(n)*time.Second, nil
					}
				}
				if err != nil || d <= 0 || d > MaxReady {
					return errAt(vv.Line, "ready timeout must be a duration like 30s, at most %v, got %q", MaxReady, s)
				}
				r.Timeout = d
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	} else {
		return nil, errAt(v.Line, "ready takes a port number or a mapping with cmd or port, got %s", kindName(v))
	}
	if (r.Cmd == "") == (r.Port == 0) {
		return nil, errAt(v.Line, "ready needs exactly one of cmd and port")
	}
	if r.Port != 0 && (r.Port < 1 || r.Port > 65535) {
		return nil, errAt(v.Line, "ready port must be between 1 and 65535")
	}
	return r, nil
}
