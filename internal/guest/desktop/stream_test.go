package desktop

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamRelay: the live view's port serves noVNC's page and relays a
// WebSocket handshake to x11vnc, which answers 101 and then speaks RFB.
func TestStreamRelay(t *testing.T) {
	m := startDesktop(t, 640, 480)
	base := fmt.Sprintf("http://127.0.0.1:%d", m.opt.StreamPort)
	resp, err := http.Get(base + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), "noVNC") || !strings.HasSuffix(resp.Request.URL.Path, "/vnc.html") {
		t.Fatalf("GET / answered %d at %s: %q", resp.StatusCode, resp.Request.URL, body)
	}
	c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.opt.StreamPort))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET /websockify HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: binary\r\n\r\n")
	br := bufio.NewReader(c)
	status, err := br.ReadString('\n')
	if err != nil || !strings.Contains(status, " 101 ") {
		t.Fatalf("handshake answered %q, %v", status, err)
	}
	for {
		line, err := br.ReadString('\n')
		if err != nil {
			t.Fatal(err)
		}
		if line == "\r\n" {
			break
		}
	}
	// The first WebSocket frame: a binary frame holding "RFB 003.00x\n".
	hdr := make([]byte, 2)
	if _, err := io.ReadFull(br, hdr); err != nil {
		t.Fatal(err)
	}
	payload := make([]byte, hdr[1]&0x7f)
	if _, err := io.ReadFull(br, payload); err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(payload), "RFB 003.") {
		t.Errorf("first frame %q, want the RFB version", payload)
	}
}

// TestVNCRestarts: an x11vnc that ended is started again and accepts
// (ended by SIGTERM, so that it removes its shared memory segments from
// the host's IPC namespace).
func TestVNCRestarts(t *testing.T) {
	m := startDesktop(t, 640, 480)
	m.mu.Lock()
	old := m.procs["vnc"]
	m.mu.Unlock()
	old.Terminate()
	deadline := time.Now().Add(60 * time.Second)
	for {
		d := m.Get()
		if pid := d.Processes["vnc"]; pid != 0 && pid != old.Pid() {
			if c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", m.opt.VNCPort)); err == nil {
				c.Close()
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("x11vnc not restarted within 60 s: %+v", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
