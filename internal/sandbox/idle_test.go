package sandbox

import (
	"bufio"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestActiveTransport: a guest request is use from its start until its
// body is closed, an upgraded one stays writable, and the clock restarts.
func TestActiveTransport(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Upgrade") != "" {
			conn, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			defer conn.Close()
			brw.WriteString("HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: test\r\n\r\n")
			brw.Flush()
			line, _ := brw.ReadString('\n')
			brw.WriteString(line)
			brw.Flush()
			return
		}
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-release
	}))
	defer srv.Close()
	defer close(release)
	e := &entry{guest: &http.Transport{}, idle: time.Hour}
	e.act.last.Store(time.Now().Add(-time.Hour).UnixNano())
	rt := activeTransport{e}

	req, _ := http.NewRequest("GET", srv.URL, nil)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	if e.act.busy.Load() != 1 || e.act.idleFor(time.Now().Add(time.Hour)) != 0 {
		t.Fatalf("while the answer streams: busy %d", e.act.busy.Load())
	}
	resp.Body.Close()
	resp.Body.Close() // twice: counted once
	if b := e.act.busy.Load(); b != 0 {
		t.Fatalf("after close: busy %d", b)
	}
	if d := e.act.idleFor(time.Now()); d < 0 || d > time.Second {
		t.Fatalf("idle for %v right after a request", d)
	}

	req, _ = http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "test")
	resp, err = rt.RoundTrip(req)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		t.Fatalf("upgrade: %v %v", resp, err)
	}
	rwc, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		t.Fatalf("an upgraded body must stay writable, got %T", resp.Body)
	}
	io.WriteString(rwc, "ping\n")
	if line, _ := bufio.NewReader(rwc).ReadString('\n'); line != "ping\n" {
		t.Fatalf("echo: %q", line)
	}
	if e.act.busy.Load() != 1 {
		t.Fatalf("an open upgraded connection is use")
	}
	rwc.Close()
	if e.act.busy.Load() != 0 {
		t.Fatalf("after closing the upgraded connection: busy %d", e.act.busy.Load())
	}
}
