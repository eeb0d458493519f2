package integration

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

func TestExecSemantics(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Env: map[string]string{"SANDBOX_VAR": "from-create"}})
	tests := []struct {
		name       string
		req        api.ExecRequest
		wantCode   int
		wantOut    string
		wantErr    string
		wantSignal string
	}{
		{name: "argv", req: api.ExecRequest{Cmd: []string{"echo", "a b", "c"}}, wantOut: "a b c\n"},
		{name: "shell", req: api.ExecRequest{Shell: "echo $((6*7))"}, wantOut: "42\n"},
		{name: "exit code", req: api.ExecRequest{Shell: "exit 3"}, wantCode: 3},
		{name: "stderr", req: api.ExecRequest{Shell: "echo oops >&2; exit 1"}, wantCode: 1, wantErr: "oops\n"},
		{name: "signal", req: api.ExecRequest{Shell: "kill -9 $$"}, wantCode: 137, wantSignal: "SIGKILL"},
		{name: "stdin", req: api.ExecRequest{Cmd: []string{"cat"}, Stdin: []byte("from stdin")}, wantOut: "from stdin"},
		{name: "no stdin is empty", req: api.ExecRequest{Cmd: []string{"cat"}}, wantOut: ""},
		{name: "env from request", req: api.ExecRequest{Shell: "echo $FOO", Env: map[string]string{"FOO": "bar"}}, wantOut: "bar\n"},
		{name: "env from create", req: api.ExecRequest{Shell: "echo $SANDBOX_VAR"}, wantOut: "from-create\n"},
		{name: "request env wins", req: api.ExecRequest{Shell: "echo $SANDBOX_VAR", Env: map[string]string{"SANDBOX_VAR": "req"}}, wantOut: "req\n"},
		{name: "cwd", req: api.ExecRequest{Shell: "pwd", Cwd: "/tmp"}, wantOut: "/tmp\n"},
		{name: "user", req: api.ExecRequest{Shell: "id -u", User: "user"}, wantOut: "1000\n"},
		{name: "numeric user", req: api.ExecRequest{Shell: "id -u", User: "4242"}, wantOut: "4242\n"},
		{name: "missing command", req: api.ExecRequest{Cmd: []string{"no-such-cmd"}}, wantCode: 127},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := execReq(t, id, tc.req)
			if res.ExitCode != tc.wantCode {
				t.Errorf("exit code = %d, want %d (stderr %q)", res.ExitCode, tc.wantCode, res.Stderr)
			}
			if tc.wantOut != "" || tc.req.Stdin != nil || tc.name == "no stdin is empty" {
				if res.Stdout != tc.wantOut {
					t.Errorf("stdout = %q, want %q", res.Stdout, tc.wantOut)
				}
			}
			if tc.wantErr != "" && res.Stderr != tc.wantErr {
				t.Errorf("stderr = %q, want %q", res.Stderr, tc.wantErr)
			}
			if res.Signal != tc.wantSignal {
				t.Errorf("signal = %q, want %q", res.Signal, tc.wantSignal)
			}
		})
	}
}

func TestExecValidation(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	ctx := context.Background()
	for name, req := range map[string]api.ExecRequest{
		"neither cmd nor shell": {},
		"both cmd and shell":    {Cmd: []string{"true"}, Shell: "true"},
		"missing cwd":           {Shell: "true", Cwd: "/does/not/exist"},
		"unknown user":          {Shell: "true", User: "nobody-here"},
		"magic link cwd":        {Shell: "true", Cwd: "/proc/self/fd/0"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := env.client.Exec(ctx, id, req)
			if !errors.Is(err, errdefs.ErrInvalidArgument) && !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("err = %v, want an invalid-argument error", err)
			}
		})
	}
	if _, err := env.client.Exec(ctx, "nosuchsandbox", api.ExecRequest{Shell: "true"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("exec in a missing sandbox: err = %v, want not found", err)
	}
}

func TestExecTimeoutKillsTree(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	start := time.Now()
	// A double-forked, setsid'd sleeper that ignores SIGTERM.
	res := execReq(t, id, api.ExecRequest{
		Shell:     "(trap '' TERM; setsid sh -c 'trap \"\" TERM; sleep 300' &) ; sleep 300",
		TimeoutMs: 500,
	})
	// Without the kill the sleepers hold the exec for 300 s.
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("timeout took %v", took)
	}
	if !res.TimedOut {
		t.Errorf("timed_out not set: %+v", res)
	}
	// Nothing but init (and this ps) is left.
	out := mustSh(t, id, "ps -o pid,comm | grep -v -e PID -e ps -e agentbox-guest -e 'sh$' || true")
	if strings.Contains(out, "sleep") {
		t.Errorf("a sleeper survived the timeout:\n%s", out)
	}
}

func TestExecLargeAndBinaryOutput(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	ctx := context.Background()
	// 20 MiB through the stream; compare hashes computed inside and outside.
	var stdout bytes.Buffer
	ev, err := env.client.ExecStream(ctx, id, api.ExecRequest{Shell: "head -c 20971520 /dev/urandom | tee /tmp/r | cat; sha256sum /tmp/r >&2"}, nil, &stdout, &stderrSink{})
	if err != nil {
		t.Fatal(err)
	}
	if ev.ExitCode == nil || *ev.ExitCode != 0 {
		t.Fatalf("exit event %+v", ev)
	}
	if stdout.Len() != 20<<20 {
		t.Fatalf("got %d bytes, want %d", stdout.Len(), 20<<20)
	}
	sum := fmt.Sprintf("%x", sha256.Sum256(stdout.Bytes()))
	inside := mustSh(t, id, "sha256sum /tmp/r | cut -d' ' -f1")
	if sum != inside {
		t.Fatalf("binary output corrupted: sha256 outside %s, inside %s", sum, inside)
	}
	// Buffered exec with binary output comes back as base64.
	res := execReq(t, id, api.ExecRequest{Shell: "printf '\\377\\000\\001'"})
	out, _, err := client.DecodeOutput(res)
	if err != nil || !bytes.Equal(out, []byte{0xff, 0, 1}) {
		t.Fatalf("binary buffered output = %v (%v), encoding %q", out, err, res.Encoding)
	}
	// A cap truncates and says so.
	res = execReq(t, id, api.ExecRequest{Shell: "yes | head -c 1000000", MaxOutputBytes: 1000})
	if !res.Truncated || len(res.Stdout) != 1000 {
		t.Fatalf("truncated=%v len=%d, want true and 1000", res.Truncated, len(res.Stdout))
	}
}

type stderrSink struct{ bytes.Buffer }

func TestExecStreamStdinAndOrder(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	ctx := context.Background()
	pr := strings.NewReader("line1\nline2\n")
	var out, errb bytes.Buffer
	ev, err := env.client.ExecStream(ctx, id, api.ExecRequest{Shell: "while read l; do echo got-$l; done; echo done >&2; exit 5", StdinStream: true}, pr, &out, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if *ev.ExitCode != 5 || out.String() != "got-line1\ngot-line2\n" || errb.String() != "done\n" {
		t.Fatalf("exit %d stdout %q stderr %q", *ev.ExitCode, out.String(), errb.String())
	}
}
