package cli

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// desktopDaemon answers the desktop's routes and records what it was
// sent, as "METHOD /path?query body".
type desktopDaemon struct {
	mu   sync.Mutex
	seen []string
}

func newDesktopDaemon(t *testing.T) *desktopDaemon {
	d := &desktopDaemon{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.seen = append(d.seen, strings.TrimSpace(r.Method+" "+r.URL.RequestURI()+" "+string(b)))
		d.mu.Unlock()
		p := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/abcdefghijkl/desktop")
		switch {
		case p == "/screenshot":
			w.Header().Set("Content-Type", "image/png")
			w.Header().Set("X-Image-Width", "2")
			w.Write([]byte("\x89PNG fake"))
		case p == "/stream":
			json.NewEncoder(w).Encode(api.DesktopStream{URL: "http://6080-x.d/vnc.html?view_only=" + r.URL.Query().Get("view_only"), ViewOnly: true})
		case p == "/actions":
			json.NewEncoder(w).Encode(api.DesktopActionsResult{Cursor: api.Point{X: 3, Y: 4},
				Screenshot: &api.ScreenshotData{Format: "png", Data: []byte("img")}})
		case p == "/windows":
			json.NewEncoder(w).Encode(api.DesktopWindowList{Windows: []api.DesktopWindow{{ID: 0x400001, Title: "page - Chromium", App: "Chromium", Width: 800, Height: 600, Focused: true}}})
		case p == "" && r.Method != "DELETE":
			json.NewEncoder(w).Encode(api.Desktop{State: api.DesktopRunning, Display: ":0", Width: 1024, Height: 768, DPI: 96})
		case p == "/launch" || p == "/open":
			json.NewEncoder(w).Encode(api.Process{Pid: 42})
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	}))
	t.Cleanup(srv.Close)
	t.Setenv("AGENTBOX_HOST", srv.URL)
	t.Setenv("AGENTBOX_API_KEY", "test-key")
	return d
}

func TestDesktopVerbs(t *testing.T) {
	d := newDesktopDaemon(t)
	const id = "abcdefghijkl"
	shot := filepath.Join(t.TempDir(), "after.png")
	for _, tt := range []struct {
		args    []string
		stdin   string
		wantOut string
		wantReq string
	}{
		{[]string{"start", "--width", "800", "--height", "600", id}, "", "running :0 1024x768 dpi 96\n",
			`POST /v1/sandboxes/abcdefghijkl/desktop {"width":800,"height":600}`},
		{[]string{"click", "--button", "right", id, "10", "20"}, "", "",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"click","x":10,"y":20,"button":"right"}]}`},
		{[]string{"type", id, "Grüße ✓"}, "", "",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"type","text":"Grüße ✓"}]}`},
		{[]string{"key", id, "ctrl+l"}, "", "",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"key","keys":"ctrl+l"}]}`},
		{[]string{"drag", id, "1", "2", "3", "4"}, "", "",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"drag","path":[{"x":1,"y":2},{"x":3,"y":4}]}]}`},
		{[]string{"scroll", id, "5", "6", "0", "3"}, "", "",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"scroll","x":5,"y":6,"dy":3}]}`},
		{[]string{"actions", "--screenshot", shot, id, "-"}, `[{"type":"wait","ms":5}]`, "cursor 3 4\n",
			`POST /v1/sandboxes/abcdefghijkl/desktop/actions {"actions":[{"type":"wait","ms":5}],"screenshot":{}}`},
		{[]string{"screenshot", "--format", "jpeg", "--scale", "0.5", "--region", "1,2,3,4", id}, "", "\x89PNG fake",
			`GET /v1/sandboxes/abcdefghijkl/desktop/screenshot?format=jpeg&h=4&scale=0.5&w=3&x=1&y=2`},
		{[]string{"url", id}, "", "http://6080-x.d/vnc.html?view_only=true\n",
			`GET /v1/sandboxes/abcdefghijkl/desktop/stream?view_only=true`},
		{[]string{"url", "--interactive", id}, "", "http://6080-x.d/vnc.html?view_only=false\n",
			`GET /v1/sandboxes/abcdefghijkl/desktop/stream?view_only=false`},
		{[]string{"open", id, "http://127.0.0.1:8000/"}, "", "42\n",
			`POST /v1/sandboxes/abcdefghijkl/desktop/open {"url":"http://127.0.0.1:8000/"}`},
		{[]string{"launch", id, "--", "xterm", "-e", "top"}, "", "42\n",
			`POST /v1/sandboxes/abcdefghijkl/desktop/launch {"cmd":["xterm","-e","top"]}`},
		{[]string{"launch", id, "terminal"}, "", "42\n",
			`POST /v1/sandboxes/abcdefghijkl/desktop/launch {"app":"terminal"}`},
		{[]string{"stop", id}, "", "", `DELETE /v1/sandboxes/abcdefghijkl/desktop`},
	} {
		d.seen = nil
		out, errOut, code := run(t, tt.stdin, append([]string{"desktop"}, tt.args...)...)
		if code != 0 {
			t.Errorf("desktop %v: exit %d, stderr %q", tt.args, code, errOut)
			continue
		}
		if out != tt.wantOut {
			t.Errorf("desktop %v: stdout %q, want %q", tt.args, out, tt.wantOut)
		}
		if len(d.seen) != 1 || d.seen[0] != tt.wantReq {
			t.Errorf("desktop %v sent %q, want %q", tt.args, d.seen, tt.wantReq)
		}
	}
	if b, err := os.ReadFile(shot); err != nil || string(b) != "img" {
		t.Errorf("actions --screenshot wrote %q, %v", b, err)
	}
	out, _, _ := run(t, "", "desktop", "windows", id)
	if !strings.Contains(out, "0x400001  *      800x600+0+0  Chromium  page - Chromium") {
		t.Errorf("windows printed %q", out)
	}
	if _, errOut, code := run(t, "", "desktop", "click", id, "x", "1"); code != 2 || !strings.Contains(errOut, "not an integer") {
		t.Errorf("a bad X: exit %d, %q", code, errOut)
	}
}
