package server

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// bodyServer serves the daemon's JSON decoding on loopback TCP: the
// transport where an early close turns into a reset.
func bodyServer(t *testing.T) *httptest.Server {
	t.Helper()
	s := &Server{maxBody: 1 << 20}
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req api.CreateSandboxRequest
		if err := s.decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, req)
	}))
	t.Cleanup(ts.Close)
	return ts
}

// TestOversizedBodyAnswered: a body the daemon refuses reaches curl (a
// real client, `Expect: 100-continue` on for large bodies) as a 4xx every
// time, never as a reset: 413 on Content-Length before the body is asked
// for, and 400 for a body within the limit whose first byte is wrong.
func TestOversizedBodyAnswered(t *testing.T) {
	curl, err := exec.LookPath("curl")
	if err != nil {
		t.Fatalf("curl is needed (scripts/install-deps.sh installs it): %v", err)
	}
	ts := bodyServer(t)
	dir := t.TempDir()
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, bytes.Repeat([]byte("x"), 50<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	small := filepath.Join(dir, "small")
	if err := os.WriteFile(small, bytes.Repeat([]byte("x"), 900<<10), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file string
		expect     bool
		want       string
	}{
		{"50MB expect-continue", big, true, "413"},
		{"50MB no expect", big, false, "413"},
		{"900KB bad JSON expect-continue", small, true, "400"},
		{"900KB bad JSON no expect", small, false, "400"},
	} {
		for try := range 4 {
			args := []string{"-sS", "-o", "/dev/null", "-w", "%{http_code}", "--data-binary", "@" + c.file,
				"-H", "Content-Type: application/json", ts.URL + "/v1/sandboxes"}
			if !c.expect {
				args = append(args, "-H", "Expect:")
			} else {
				args = append(args, "-H", "Expect: 100-continue")
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			out, err := exec.CommandContext(ctx, curl, args...).CombinedOutput()
			cancel()
			if got := strings.TrimSpace(string(out)); err != nil || got != c.want {
				t.Errorf("%s, try %d: curl answered %q (%v), want %s", c.name, try+1, got, err, c.want)
			}
		}
	}
}

// TestOversizedBodyNoContinue: with `Expect: 100-continue` and a
// Content-Length over the limit, the first answer is the 413 itself (no
// 100 Continue), with the API's error body.
func TestOversizedBodyNoContinue(t *testing.T) {
	ts := bodyServer(t)
	conn, err := net.Dial("tcp", ts.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/sandboxes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", 50<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), `"invalid_argument"`) || !strings.Contains(string(body), "52428800 bytes") {
		t.Fatalf("got %d %s, want 413 invalid_argument naming the size", resp.StatusCode, body)
	}
}
