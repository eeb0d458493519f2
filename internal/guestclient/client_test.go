package guestclient

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// fakeAgent serves h on a unix socket and returns its path.
func fakeAgent(t *testing.T, h http.HandlerFunc) string {
	t.Helper()
	sock := filepath.Join(t.TempDir(), "g.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return sock
}

// TestErrors: an agent's error answer comes back in its class with its
// message; an answer without a body is unavailable with the status; a
// request that got no answer is unavailable and Unreachable.
func TestErrors(t *testing.T) {
	sock := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("path") {
		case "/missing":
			w.WriteHeader(http.StatusNotFound)
			io.WriteString(w, `{"error":{"code":"not_found","message":"/missing: no such file"}}`)
		case "/bare":
			w.WriteHeader(http.StatusBadGateway)
		default:
			io.WriteString(w, "data")
		}
	})
	c := Unix(sock)
	ctx := context.Background()
	if b, err := c.ReadFile(ctx, "/ok", 0); err != nil || string(b) != "data" {
		t.Errorf("ReadFile = %q, %v", b, err)
	}
	if _, err := c.ReadFile(ctx, "/ok", 2); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("ReadFile past its cap = %v, want invalid", err)
	}
	_, err := c.ReadFile(ctx, "/missing", 0)
	if !errors.Is(err, errdefs.ErrNotFound) || err.Error() != "/missing: no such file" || Unreachable(err) {
		t.Errorf("ReadFile of a missing file = %v, want the agent's not found", err)
	}
	_, err = c.ReadFile(ctx, "/bare", 0)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "502") || Unreachable(err) {
		t.Errorf("ReadFile answered 502 = %v, want unavailable with the status", err)
	}
	_, err = Unix(sock+".gone").ReadFile(ctx, "/ok", 0)
	if !errors.Is(err, errdefs.ErrUnavailable) || !Unreachable(err) || !strings.HasPrefix(err.Error(), "guest agent: ") {
		t.Errorf("ReadFile of no agent = %v, want unreachable", err)
	}
}

// TestRequests: each method sends its route from the table, with its
// query, and reads its answer.
func TestRequests(t *testing.T) {
	var got []string
	sock := fakeAgent(t, func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Method+" "+r.URL.RequestURI())
		switch r.URL.Path {
		case "/processes":
			io.WriteString(w, `{"pid":7,"cmd":["sh"]}`)
		case "/processes/7/stream":
			w.Header().Set("Content-Type", "application/x-ndjson")
			io.WriteString(w, `{"type":"stdout","data":"aGk="}`+"\n"+`{"type":"exit","exit_code":3}`+"\n")
		case "/env", "/checkpoint":
			w.WriteHeader(http.StatusNoContent)
		default:
			io.WriteString(w, `{}`)
		}
	})
	c := Unix(sock)
	ctx := context.Background()
	var out strings.Builder
	code, err := c.RunProcess(ctx, api.StartProcessRequest{Shell: "echo hi; exit 3"}, func(stream string, b []byte) { out.WriteString(stream + ":" + string(b)) })
	if err != nil || code != 3 || out.String() != "stdout:hi" {
		t.Errorf("RunProcess = %d, %q, %v; want 3, stdout:hi", code, out.String(), err)
	}
	if err := c.WriteFile(ctx, "/etc/x", strings.NewReader("x"), WriteOptions{Mode: "0644", User: "root"}); err != nil {
		t.Error(err)
	}
	if err := c.SetEnv(ctx, []string{"A=1"}); err != nil {
		t.Error(err)
	}
	if err := c.Checkpoint(ctx); err != nil {
		t.Error(err)
	}
	want := []string{
		proto.ProcessStart.Method + " /processes",
		proto.ProcessStream.Method + " /processes/7/stream",
		"PUT /files?mode=0644&path=%2Fetc%2Fx&user=root",
		"PUT /env",
		"POST /checkpoint",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
