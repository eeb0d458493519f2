package guest

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// FuzzGuestProcessRequest decodes arbitrary bodies as the guest's process
// and PTY routes do (start, signal, PTY create and resize, output offsets:
// picked by the first byte) and runs the checks those routes make before
// anything is started. It starts nothing. Every refusal must be an
// invalid-argument error, and what is accepted must hold up: something to
// run with no NUL in it and an absolute cwd, a tag that cannot be read as
// a pid, buffer sizes, signals and terminal sizes in range, offsets of 0
// or more, and an environment of KEY=VALUE entries.
func FuzzGuestProcessRequest(f *testing.F) {
	for _, s := range []struct {
		kind byte
		body string
	}{
		{0, `{"cmd":["sleep","30"],"tag":"web","max_buffer_bytes":4096,"env":{"A":"1"}}`},
		{0, `{"shell":"echo hi","tag":"007"}`},
		{0, `{"cmd":["x"],"tag":"a/b","max_buffer_bytes":-1}`},
		{1, `{"signal":"SIGTERM","tree":true}`},
		{1, `{"signal":9}`}, {1, `{"signal":"0"}`}, {1, `{"signal":64.5}`}, {1, `{"signal":"sigrtmax"}`},
		{2, `{"cols":0,"rows":0,"shell":"bash","env":{"TERM":"dumb"}}`},
		{2, `{"cmd":["vi"],"cols":5000}`},
		{3, `{"cols":-1,"rows":24}`},
		{4, `stdout_offset=10&stderr_offset=-1`},
		{4, `stdout_offset=9223372036854775808`},
	} {
		f.Add(s.kind, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, kind byte, body []byte) {
		decode := func(v any, limit int64) bool {
			r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
			return json.NewDecoder(http.MaxBytesReader(httptest.NewRecorder(), r.Body, limit)).Decode(v) == nil
		}
		refused := func(err error) bool {
			if err != nil && !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Fatalf("refusal %v of %q is not invalid_argument", err, body)
			}
			return err != nil
		}
		switch kind % 5 {
		case 0: // POST /processes
			var req api.StartProcessRequest
			if !decode(&req, 1<<20) || refused(checkStartProcess(&req)) {
				return
			}
			if len(req.Tag) > 128 || strings.ContainsAny(req.Tag, "/\x00") || req.MaxBufferBytes < 0 || req.MaxBufferBytes > api.MaxProcessBuffer {
				t.Fatalf("accepted tag %q, max_buffer_bytes %d", req.Tag, req.MaxBufferBytes)
			}
			if _, err := strconv.Atoi(req.Tag); err == nil {
				t.Fatalf("accepted tag %q, which lookups would read as a pid", req.Tag)
			}
			checkExec(t, body, &api.ExecRequest{Cmd: req.Cmd, Shell: req.Shell, Env: req.Env, Cwd: req.Cwd, User: req.User, TimeoutMs: req.TimeoutMs})
		case 1: // POST /processes/{ref}/signal
			var req api.SignalRequest
			if !decode(&req, 64<<10) {
				return
			}
			sig, err := signalByName(req.Signal)
			if refused(err) {
				return
			}
			if sig < 1 || sig > 64 {
				t.Fatalf("accepted signal %d from %q", sig, body)
			}
		case 2: // POST /pty
			var req api.CreatePTYRequest
			if !decode(&req, 1<<20) {
				return
			}
			cols, rows := req.Cols, req.Rows
			if refused(checkSize(&cols, &rows)) {
				return
			}
			checkTermSize(t, body, cols, rows)
			if len(req.Cmd) == 0 && req.Shell == "" {
				req.Cmd = []string{"/bin/sh", "-l"} // the login shell startPTY picks
			}
			checkExec(t, body, &api.ExecRequest{Cmd: req.Cmd, Shell: req.Shell, Env: req.Env, Cwd: req.Cwd, User: req.User})
		case 3: // POST /pty/{pid}/resize
			var sz api.PTYSize
			if !decode(&sz, 4096) {
				return
			}
			cols, rows := sz.Cols, sz.Rows
			if !refused(checkSize(&cols, &rows)) {
				checkTermSize(t, body, cols, rows)
			}
		case 4: // GET /processes/{ref}/output?stdout_offset=&stderr_offset=
			r := httptest.NewRequest("GET", "/", nil)
			r.URL.RawQuery = string(body)
			if _, err := url.ParseQuery(r.URL.RawQuery); err != nil {
				return
			}
			out, errOff, err := offsets(r)
			if !refused(err) && (out < 0 || errOff < 0) {
				t.Fatalf("accepted offsets %d, %d from %q", out, errOff, body)
			}
		}
	})
}

// checkExec: what the exec checks accept has a program to run, no NUL in
// it, an absolute cwd and a clean environment.
func checkExec(t *testing.T, body []byte, req *api.ExecRequest) {
	t.Helper()
	if err := validate(req, true); err != nil {
		if !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Fatalf("refusal %v of %q is not invalid_argument", err, body)
		}
		return
	}
	if (len(req.Cmd) == 0) == (req.Shell == "") || (len(req.Cmd) > 0 && req.Cmd[0] == "") {
		t.Fatalf("accepted %q without exactly one of a program or a shell line", body)
	}
	for _, s := range append([]string{req.Shell, req.Cwd}, req.Cmd...) {
		if strings.IndexByte(s, 0) >= 0 {
			t.Fatalf("accepted a NUL byte in %q", body)
		}
	}
	if req.Cwd != "" && !strings.HasPrefix(req.Cwd, "/") || req.TimeoutMs < 0 {
		t.Fatalf("accepted cwd %q, timeout_ms %d", req.Cwd, req.TimeoutMs)
	}
	env, err := buildEnv([]string{"PATH=/bin", "junk"}, req.Env, users.User{Name: "u", Home: "/h"})
	if err != nil {
		return
	}
	for _, kv := range env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" || strings.IndexByte(kv, 0) >= 0 {
			t.Fatalf("environment entry %q from %q", kv, body)
		}
	}
}

func checkTermSize(t *testing.T, body []byte, cols, rows int) {
	t.Helper()
	if cols < 1 || cols > 4096 || rows < 1 || rows > 4096 {
		t.Fatalf("accepted a %dx%d terminal from %q", cols, rows, body)
	}
}
