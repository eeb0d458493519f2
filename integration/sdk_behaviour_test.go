package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// The shared behaviour suite (sdk/testdata/behaviour, described in its
// README.md) run by the Go SDK. The Python SDK runs the same cases in
// sdk/python/tests/test_behaviour.py, driven by python_sdk_test.go.

type behaviourCase struct {
	Name      string          `json:"name"`
	Template  string          `json:"template"`
	NoSandbox bool            `json:"no_sandbox"`
	Steps     []behaviourStep `json:"steps"`
}

type behaviourStep struct {
	Op        string                     `json:"op"`
	Cmd       json.RawMessage            `json:"cmd"`
	Env       map[string]string          `json:"env"`
	Cwd       string                     `json:"cwd"`
	User      string                     `json:"user"`
	TimeoutS  float64                    `json:"timeout_s"`
	Stdin     *string                    `json:"stdin"`
	Stream    bool                       `json:"stream"`
	Path      string                     `json:"path"`
	Text      *string                    `json:"text"`
	B64       string                     `json:"b64"`
	Mode      string                     `json:"mode"`
	Depth     int                        `json:"depth"`
	Recursive bool                       `json:"recursive"`
	From      string                     `json:"from"`
	To        string                     `json:"to"`
	Tree      map[string]json.RawMessage `json:"tree"`
	Remote    string                     `json:"remote"`
	Seconds   int64                      `json:"seconds"`
	ID        string                     `json:"id"`
	Args      json.RawMessage            `json:"args"`
	Tag       string                     `json:"tag"`
	Ref       string                     `json:"ref"`
	EOF       bool                       `json:"eof"`
	Count     int                        `json:"count"`
	Expect    behaviourExpect            `json:"expect"`
	// run_code, create_code_context (sdk_behaviour_code_test.go):
	Code     string `json:"code"`
	Context  string `json:"context"`
	Language string `json:"language"`
}

type behaviourExpect struct {
	Error          string                     `json:"error"`
	Stdout         *string                    `json:"stdout"`
	Stderr         *string                    `json:"stderr"`
	ExitCode       *int                       `json:"exit_code"`
	TimedOut       *bool                      `json:"timed_out"`
	Signal         *string                    `json:"signal"`
	StdoutContains string                     `json:"stdout_contains"`
	Size           *int64                     `json:"size"`
	Mode           string                     `json:"mode"`
	Text           *string                    `json:"text"`
	B64            string                     `json:"b64"`
	Type           string                     `json:"type"`
	Value          *bool                      `json:"value"`
	Paths          []string                   `json:"paths"`
	Tree           map[string]json.RawMessage `json:"tree"`
	HasExpiry      *bool                      `json:"has_expiry"`
	State          string                     `json:"state"`
	Template       string                     `json:"template"`
	Count          *int                       `json:"count"`
	// run_code:
	Status    *string  `json:"status"`
	Restarted *bool    `json:"restarted"`
	ErrorName *string  `json:"error_name"`
	Formats   []string `json:"formats"`
}

func loadBehaviourCases(t *testing.T) []behaviourCase {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(env.repo, "sdk/testdata/behaviour/*.json"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no behaviour cases in sdk/testdata/behaviour (%v)", err)
	}
	sort.Strings(files)
	var cases []behaviourCase
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var cs []behaviourCase
		dec := json.NewDecoder(bytes.NewReader(b))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&cs); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		cases = append(cases, cs...)
	}
	return cases
}

func TestSDKBehaviourGo(t *testing.T) {
	needBase(t)
	runBehaviourSuite(t, env.client)
}

// runBehaviourSuite runs every behaviour case with the Go SDK client c (the
// test daemon, or a fleet's gateway: cluster_test.go).
func runBehaviourSuite(t *testing.T, c *client.Client) {
	cases := loadBehaviourCases(t)
	if len(cases) < 10 {
		t.Fatalf("found only %d behaviour cases", len(cases))
	}
	for _, bc := range cases {
		t.Run(bc.Name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			id := ""
			if !bc.NoSandbox {
				tmpl := bc.Template
				if tmpl == "" {
					tmpl = "base"
				}
				sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tmpl, TTLSeconds: 300, Metadata: map[string]string{"suite": "behaviour-go"}})
				if err != nil {
					t.Fatalf("create: %v", err)
				}
				t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), sb.ID) })
				id = sb.ID
			}
			snaps := map[string]string{} // snapshot step tag -> id
			for i, s := range bc.Steps {
				err := runBehaviourStep(ctx, t, c, id, s, snaps)
				want := s.Expect.Error
				switch {
				case want == "" && err != nil:
					t.Fatalf("step %d (%s): %v", i, s.Op, err)
				case want != "" && err == nil:
					t.Fatalf("step %d (%s): succeeded, want error %s", i, s.Op, want)
				case want != "":
					class := errors.Unwrap(errdefs.FromCode(want, ""))
					if !errors.Is(err, class) {
						code, _ := errdefs.Code(err)
						t.Fatalf("step %d (%s): error %q (%s), want %s", i, s.Op, err, code, want)
					}
				}
			}
		})
	}
}

// mismatch reports a step whose result differs from the expectation (not
// an API error, so it never satisfies expect.error).
type mismatch struct{ msg string }

func (m mismatch) Error() string { return m.msg }

func expectEq[T comparable](what string, got T, want *T) error {
	if want != nil && got != *want {
		return mismatch{fmt.Sprintf("%s = %#v, want %#v", what, got, *want)}
	}
	return nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func blob(raw json.RawMessage) ([]byte, error) {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s), nil
	}
	var b struct {
		B64 string `json:"b64"`
	}
	if err := json.Unmarshal(raw, &b); err != nil {
		return nil, err
	}
	return base64.StdEncoding.DecodeString(b.B64)
}

func runBehaviourStep(ctx context.Context, t *testing.T, c *client.Client, id string, s behaviourStep, snaps map[string]string) error {
	x := s.Expect
	switch s.Op {
	case "exec":
		req := api.ExecRequest{Env: s.Env, Cwd: s.Cwd, User: s.User, TimeoutMs: int64(s.TimeoutS * 1000)}
		var shell string
		if json.Unmarshal(s.Cmd, &shell) == nil {
			req.Shell = shell
		} else if err := json.Unmarshal(s.Cmd, &req.Cmd); err != nil {
			return fmt.Errorf("bad cmd %s: %v", s.Cmd, err)
		}
		var stdout, stderr string
		var res *api.ExecResult
		if s.Stream {
			var stdin io.Reader
			if s.Stdin != nil {
				stdin = strings.NewReader(*s.Stdin)
			}
			var o, e bytes.Buffer
			ev, err := c.ExecStream(ctx, id, req, stdin, &o, &e)
			if err != nil {
				return err
			}
			res = &api.ExecResult{ExitCode: *ev.ExitCode, Signal: ev.Signal, TimedOut: ev.TimedOut}
			stdout, stderr = o.String(), e.String()
		} else {
			if s.Stdin != nil {
				req.Stdin = []byte(*s.Stdin)
			}
			r, err := c.Exec(ctx, id, req)
			if err != nil {
				return err
			}
			o, e, err := client.DecodeOutput(r)
			if err != nil {
				return err
			}
			res, stdout, stderr = r, string(o), string(e)
		}
		if x.StdoutContains != "" && !strings.Contains(stdout, x.StdoutContains) {
			return mismatch{fmt.Sprintf("stdout %q lacks %q", stdout, x.StdoutContains)}
		}
		return firstErr(expectEq("stdout", stdout, x.Stdout), expectEq("stderr", stderr, x.Stderr),
			expectEq("exit_code", res.ExitCode, x.ExitCode), expectEq("timed_out", res.TimedOut, x.TimedOut),
			expectEq("signal", res.Signal, x.Signal))
	case "write":
		data := []byte(nil)
		if s.Text != nil {
			data = []byte(*s.Text)
		} else {
			var err error
			if data, err = base64.StdEncoding.DecodeString(s.B64); err != nil {
				return err
			}
		}
		var mode os.FileMode
		if s.Mode != "" {
			m, err := strconv.ParseUint(s.Mode, 8, 32)
			if err != nil {
				return err
			}
			mode = os.FileMode(m)
		}
		info, err := c.WriteFile(ctx, id, s.Path, bytes.NewReader(data), mode)
		if err != nil {
			return err
		}
		if x.Mode != "" && info.Mode != x.Mode {
			return mismatch{fmt.Sprintf("mode %s, want %s", info.Mode, x.Mode)}
		}
		return expectEq("size", info.Size, x.Size)
	case "read":
		rc, err := c.ReadFile(ctx, id, s.Path)
		if err != nil {
			return err
		}
		defer rc.Close()
		b, err := io.ReadAll(rc)
		if err != nil {
			return err
		}
		if x.B64 != "" && base64.StdEncoding.EncodeToString(b) != x.B64 {
			return mismatch{fmt.Sprintf("read %d bytes that differ from the expected", len(b))}
		}
		return expectEq("text", string(b), x.Text)
	case "stat":
		info, err := c.Stat(ctx, id, s.Path)
		if err != nil {
			return err
		}
		if (x.Type != "" && info.Type != x.Type) || (x.Mode != "" && info.Mode != x.Mode) {
			return mismatch{fmt.Sprintf("stat %+v, want type %q mode %q", info, x.Type, x.Mode)}
		}
		return expectEq("size", info.Size, x.Size)
	case "exists":
		_, err := c.Stat(ctx, id, s.Path)
		exists := err == nil
		if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
		return expectEq("exists", exists, x.Value)
	case "list":
		depth := s.Depth
		if depth == 0 {
			depth = 1
		}
		entries, err := c.ListFiles(ctx, id, s.Path, depth)
		if err != nil {
			return err
		}
		paths := []string{}
		for _, e := range entries {
			paths = append(paths, e.Path)
		}
		sort.Strings(paths)
		if x.Paths != nil && !reflect.DeepEqual(paths, x.Paths) {
			return mismatch{fmt.Sprintf("paths %q, want %q", paths, x.Paths)}
		}
		return nil
	case "mkdir":
		info, err := c.Mkdir(ctx, id, s.Path, 0)
		if err != nil {
			return err
		}
		if x.Type != "" && info.Type != x.Type {
			return mismatch{fmt.Sprintf("type %s, want %s", info.Type, x.Type)}
		}
		return nil
	case "remove":
		return c.Remove(ctx, id, s.Path, s.Recursive)
	case "rename":
		return c.Rename(ctx, id, s.From, s.To)
	case "upload_tree":
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		names := make([]string, 0, len(s.Tree))
		for n := range s.Tree {
			names = append(names, n)
		}
		sort.Strings(names)
		dirs := map[string]bool{}
		for _, n := range names {
			for d := filepath.Dir(n); d != "." && !dirs[d]; d = filepath.Dir(d) {
				dirs[d] = true
			}
		}
		dirList := make([]string, 0, len(dirs))
		for d := range dirs {
			dirList = append(dirList, d)
		}
		sort.Strings(dirList)
		for _, d := range dirList {
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d + "/", Mode: 0o755}); err != nil {
				return err
			}
		}
		for _, n := range names {
			b, err := blob(s.Tree[n])
			if err != nil {
				return err
			}
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(b))}); err != nil {
				return err
			}
			if _, err := tw.Write(b); err != nil {
				return err
			}
		}
		if err := tw.Close(); err != nil {
			return err
		}
		return c.UploadArchive(ctx, id, s.Remote, &buf)
	case "download_tree":
		rc, err := c.DownloadArchive(ctx, id, s.Remote)
		if err != nil {
			return err
		}
		defer rc.Close()
		got := map[string]string{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				return err
			}
			got[strings.TrimPrefix(h.Name, "./")] = string(b)
		}
		want := map[string]string{}
		for n, raw := range x.Tree {
			b, err := blob(raw)
			if err != nil {
				return err
			}
			want[n] = string(b)
		}
		if !reflect.DeepEqual(got, want) {
			return mismatch{fmt.Sprintf("downloaded tree %q, want %q", got, want)}
		}
		return nil
	case "set_ttl":
		sb, err := c.SetTTL(ctx, id, time.Duration(s.Seconds)*time.Second)
		if err != nil {
			return err
		}
		return expectEq("has_expiry", sb.ExpiresAt != nil, x.HasExpiry)
	case "info":
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			return err
		}
		if (x.State != "" && sb.State != x.State) || (x.Template != "" && sb.Template != x.Template) {
			return mismatch{fmt.Sprintf("sandbox %s/%s, want %s/%s", sb.State, sb.Template, x.State, x.Template)}
		}
		return nil
	case "destroy":
		err := c.DestroySandbox(ctx, id)
		if errors.Is(err, errdefs.ErrNotFound) {
			return nil
		}
		return err
	case "connect":
		ref := s.ID
		if ref == "" {
			ref = id
		}
		_, err := c.GetSandbox(ctx, ref)
		return err
	case "create":
		var req api.CreateSandboxRequest
		dec := json.NewDecoder(bytes.NewReader(s.Args))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&req); err != nil {
			return fmt.Errorf("bad create args %s: %v", s.Args, err)
		}
		req.TTLSeconds = 60
		sb, err := c.CreateSandbox(ctx, req)
		if err == nil {
			t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), sb.ID) })
		}
		return err
	case "start":
		req := api.StartProcessRequest{Tag: s.Tag}
		if json.Unmarshal(s.Cmd, &req.Shell) != nil {
			if err := json.Unmarshal(s.Cmd, &req.Cmd); err != nil {
				return fmt.Errorf("bad cmd %s: %v", s.Cmd, err)
			}
		}
		_, err := c.StartProcess(ctx, id, req)
		return err
	case "wait":
		p, err := c.WaitProcess(ctx, id, s.Ref, int64(s.TimeoutS*1000))
		if err != nil {
			return err
		}
		code := -1
		if p.ExitCode != nil {
			code = *p.ExitCode
		}
		return expectEq("exit_code", code, x.ExitCode)
	case "output":
		out, err := c.ProcessOutput(ctx, id, s.Ref, 0, 0)
		if err != nil {
			return err
		}
		return firstErr(expectEq("stdout", string(out.Stdout), x.Stdout), expectEq("stderr", string(out.Stderr), x.Stderr))
	case "stdin":
		return c.WriteStdin(ctx, id, s.Ref, strings.NewReader(*s.Text), s.EOF)
	case "kill":
		return c.KillProcess(ctx, id, s.Ref)
	case "pause", "resume":
		f := c.PauseSandbox
		if s.Op == "resume" {
			f = c.ResumeSandbox
		}
		sb, err := f(ctx, id)
		if err != nil {
			return err
		}
		if x.State != "" && sb.State != x.State {
			return mismatch{fmt.Sprintf("state %s, want %s", sb.State, x.State)}
		}
		return nil
	case "fork":
		kids, err := c.ForkSandbox(ctx, id, s.Count)
		if err != nil {
			return err
		}
		for _, k := range kids {
			t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), k.ID) })
		}
		if err := expectEq("count", len(kids), x.Count); err != nil {
			return err
		}
		for _, k := range kids {
			rc, err := c.ReadFile(ctx, k.ID, s.Path)
			if err != nil {
				return err
			}
			b, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				return err
			}
			if err := expectEq("text", string(b), x.Text); err != nil {
				return err
			}
		}
		return nil
	case "pty", "snapshot", "from_snapshot":
		return runBehaviourStateStep(ctx, t, c, id, s, snaps)
	case "run_code", "create_code_context", "remove_code_context":
		return runBehaviourCodeStep(ctx, c, id, s)
	}
	return fmt.Errorf("unknown op %q in the behaviour suite", s.Op)
}
