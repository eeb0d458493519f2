package integration

import (
	"bytes"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// newSandbox creates a sandbox for the test and destroys it when the test
// ends.
func newSandbox(t testing.TB, req api.CreateSandboxRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sb, err := env.client.CreateSandbox(ctx, req)
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
	return sb.ID
}

func needBase(t testing.TB) {
	t.Helper()
	if !env.hasBase {
		t.Fatal("the base template is missing: run scripts/build-template.sh base --no-import (make test does)")
	}
}

// sh runs a shell command in a sandbox and returns the buffered result.
func sh(t testing.TB, id, script string) *api.ExecResult {
	t.Helper()
	return execReq(t, id, api.ExecRequest{Shell: script})
}

func execReq(t testing.TB, id string, req api.ExecRequest) *api.ExecResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	res, err := env.client.Exec(ctx, id, req)
	if err != nil {
		t.Fatalf("exec %q: %v", req.Shell+strings.Join(req.Cmd, " "), err)
	}
	return res
}

// mustSh runs script and fails the test unless it exits 0; it returns
// trimmed stdout.
func mustSh(t testing.TB, id, script string) string {
	t.Helper()
	res := sh(t, id, script)
	if res.ExitCode != 0 {
		t.Fatalf("%q exited %d\nstdout: %s\nstderr: %s", script, res.ExitCode, res.Stdout, res.Stderr)
	}
	return strings.TrimSpace(res.Stdout)
}

func readAll(t testing.TB, id, path string) []byte {
	t.Helper()
	rc, err := env.client.ReadFile(context.Background(), id, path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	defer rc.Close()
	var b bytes.Buffer
	if _, err := b.ReadFrom(rc); err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return b.Bytes()
}

// serveTCP listens on addr and hands each accepted connection to handle
// (on the accepting goroutine: handle starts its own for long work) until
// the test ends, and returns the listener.
func serveTCP(t *testing.T, network, addr string, handle func(net.Conn)) net.Listener {
	t.Helper()
	ln, err := net.Listen(network, addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			handle(c)
		}
	}()
	return ln
}
