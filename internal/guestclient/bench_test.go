package guestclient

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest"
)

// The client's cost on the daemon's paths, against the real agent on a
// unix socket, each beside the hand-built request it replaced (the
// "HandBuilt" lines, kept here as the baseline): the readiness ping of
// every create (a fresh connection), an exec on a kept-alive transport
// (the service's), and the warm pool's env write on a fresh connection.
//
//	go test -run - -bench . -benchtime 2000x ./internal/guestclient/

func benchGuest(b *testing.B) string {
	b.Helper()
	if os.Geteuid() != 0 {
		b.Skip("needs root: the agent's execs switch users")
	}
	srv := guest.NewServer(guest.Config{Version: "bench"})
	sock := filepath.Join(b.TempDir(), "guest.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		b.Fatal(err)
	}
	go srv.Serve(ln)
	b.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
	})
	// Serving before the clock starts.
	if _, err := Unix(sock).Ping(context.Background()); err != nil {
		b.Fatal(err)
	}
	return sock
}

func BenchmarkReadyPing(b *testing.B) {
	sock := benchGuest(b)
	ctx := context.Background()
	for b.Loop() {
		if _, err := Unix(sock).Ping(ctx); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkReadyPingHandBuilt(b *testing.B) {
	sock := benchGuest(b)
	ctx := context.Background()
	for b.Loop() {
		c := &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var dl net.Dialer
				return dl.DialContext(ctx, "unix", sock)
			},
			DisableKeepAlives: true,
		}}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://guest/ping", nil)
		resp, err := c.Do(req)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}

func keptAlive(sock string) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		MaxIdleConnsPerHost: 16,
		IdleConnTimeout:     30 * time.Second,
		DisableCompression:  true,
	}
}

func BenchmarkExecTrue(b *testing.B) {
	sock := benchGuest(b)
	c := New(keptAlive(sock))
	ctx := context.Background()
	req := &api.ExecRequest{Cmd: []string{"/bin/true"}}
	b.ReportAllocs()
	for b.Loop() {
		if res, err := c.Exec(ctx, req); err != nil || res.ExitCode != 0 {
			b.Fatal(res, err)
		}
	}
}

func BenchmarkExecTrueHandBuilt(b *testing.B) {
	sock := benchGuest(b)
	rt := keptAlive(sock)
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		body, _ := json.Marshal(api.ExecRequest{Cmd: []string{"/bin/true"}})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://guest/exec", bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := rt.RoundTrip(req)
		if err != nil {
			b.Fatal(err)
		}
		b2, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var res api.ExecResult
		if resp.StatusCode != http.StatusOK || json.Unmarshal(b2, &res) != nil || res.ExitCode != 0 {
			b.Fatalf("%s: %s", resp.Status, b2)
		}
	}
}

func BenchmarkSetEnvOn(b *testing.B) {
	sock := benchGuest(b)
	ctx := context.Background()
	env := []string{"PATH=/usr/bin:/bin", "A=1", "B=2"}
	for b.Loop() {
		c, err := net.Dial("unix", sock)
		if err != nil {
			b.Fatal(err)
		}
		if err := SetEnvOn(ctx, c, env); err != nil {
			b.Fatal(err)
		}
		c.Close()
	}
}
