package integration

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// The desktop's live view, seen the way a user sees it: a headless
// Chromium on the host opens the URL of GET /desktop/stream, which goes
// through the preview proxy to noVNC in the sandbox, and noVNC's canvas
// shows the pixels the API's screenshot has. Without the token there is
// nothing; the view-only password cannot click even when the page is
// told to send input; the interactive one can.
func TestDesktopLiveView(t *testing.T) {
	for _, iso := range []string{"container", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if iso == "gvisor" {
				needGvisor(t)
			}
			importDesktop(t)
			testDesktopLiveView(t, iso)
		})
	}
}

// The live view's page: one colour, and every click counted in the title
// and turning the page blue.
const liveViewPage = `<!doctype html><html><head><title>clicks:0</title></head>
<body style="margin:0;height:100vh;background:rgb(200,40,40)"><script>
let n = 0;
document.addEventListener("mousedown", () => {
	n++; document.title = "clicks:" + n; document.body.style.background = "rgb(40,40,200)";
});
</script></body></html>`

func testDesktopLiveView(t *testing.T, iso string) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "desktop", Isolation: iso, MemoryMB: 2048})
	d := env.client.Desktop(id)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := d.Start(sctx, api.StartDesktopRequest{Width: 1024, Height: 768}); err != nil {
		t.Fatalf("starting the desktop: %v", err)
	}
	if _, err := env.client.WriteFile(ctx, id, "/tmp/lv.html", strings.NewReader(liveViewPage), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Open(ctx, "file:///tmp/lv.html"); err != nil {
		t.Fatalf("opening the page: %v", err)
	}
	waitTitle := func(want string, bound time.Duration) {
		t.Helper()
		deadline := time.Now().Add(bound)
		var titles []string
		for {
			ws, err := d.Windows(ctx)
			if err != nil {
				t.Fatalf("windows: %v", err)
			}
			titles = titles[:0]
			for _, w := range ws {
				if strings.HasPrefix(w.Title, want) {
					return
				}
				titles = append(titles, w.Title)
			}
			if time.Now().After(deadline) {
				t.Fatalf("no window titled %q within %v; windows: %q", want, bound, titles)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	waitTitle("clicks:0", 3*time.Minute)

	// The point compared: in the page, away from any title bar.
	const px, py = 512, 500
	red := [3]int{200, 40, 40}
	shot := func() [3]int {
		t.Helper()
		s, err := d.Screenshot(ctx, api.ScreenshotOptions{})
		if err != nil {
			t.Fatalf("screenshot: %v", err)
		}
		img, err := png.Decode(bytes.NewReader(s.Data))
		if err != nil {
			t.Fatalf("decoding the screenshot: %v", err)
		}
		return rgbAt(img, px, py)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(200 * time.Millisecond) {
		if got := shot(); closeRGB(got, red) {
			break
		} else if time.Now().After(deadline) {
			t.Fatalf("the screenshot at %d,%d is %v, never the page's %v", px, py, got, red)
		}
	}
	want := shot()

	port := daemonTCP(t)
	streamURL := func(viewOnly bool) *url.URL {
		t.Helper()
		s, err := d.StreamURL(ctx, viewOnly)
		if err != nil {
			t.Fatalf("stream URL (view_only %v): %v", viewOnly, err)
		}
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		// The test daemon listens on its socket only: daemonTCP is its
		// TCP door, and *.localhost is loopback to Chromium.
		host := u.Hostname()
		if !strings.HasPrefix(host, fmt.Sprintf("%d-%s.", api.DesktopStreamPort, id)) {
			t.Fatalf("stream URL %s: host %q is not the preview host of port %d", s, host, api.DesktopStreamPort)
		}
		u.Host = fmt.Sprintf("%d-%s.localhost:%d", api.DesktopStreamPort, id, port)
		if u.Query().Get("view_only") != fmt.Sprint(viewOnly) || u.Query().Get(api.PreviewTokenQuery) == "" || u.Query().Get("password") == "" {
			t.Fatalf("stream URL %s lacks view_only=%v, the token or the password", s, viewOnly)
		}
		return u
	}

	// View-only: the canvas shows the screenshot's pixels.
	view := streamURL(true)
	b := newHostBrowser(t)
	if status, err := b.open(view.String()); err != nil || status != http.StatusOK {
		t.Fatalf("opening the live view: status %d, %v", status, err)
	}
	if err := b.waitNoVNCConnected(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		got, err := b.canvasPixel(px, py)
		if err != nil {
			t.Fatal(err)
		}
		if closeRGB(got, want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("noVNC's canvas at %d,%d is %v; the screenshot has %v", px, py, got, want)
		}
	}

	// Without the token: the proxy answers 401 to the page and the
	// socket, and the browser shows no noVNC.
	bare := *view
	q := bare.Query()
	q.Del(api.PreviewTokenQuery)
	bare.RawQuery = q.Encode()
	b2 := newHostBrowser(t)
	if status, err := b2.open(bare.String()); err != nil || status != http.StatusUnauthorized {
		t.Errorf("the live view without the token: status %d, %v; want 401", status, err)
	}
	if s, err := b2.noVNCStatus(); err != nil || s != "" {
		t.Errorf("the page without the token has noVNC's status %q (%v)", s, err)
	}
	hc := unixHTTP()
	ws, _ := http.NewRequest("GET", fmt.Sprintf("http://%d-%s.localhost/websockify", api.DesktopStreamPort, id), nil)
	ws.Header.Set("Connection", "Upgrade")
	ws.Header.Set("Upgrade", "websocket")
	ws.Header.Set("Sec-WebSocket-Version", "13")
	ws.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if resp, err := hc.Do(ws); err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("the WebSocket without the token: %v %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}

	// The view-only password with the page told to send input: x11vnc
	// drops it. Then the interactive URL's click arrives; the page counts
	// one click only, so the view-only one never did.
	forced := *view
	q = forced.Query()
	q.Set("view_only", "false")
	forced.RawQuery = q.Encode()
	b3 := newHostBrowser(t)
	if status, err := b3.open(forced.String()); err != nil || status != http.StatusOK {
		t.Fatalf("opening the forced view-only page: status %d, %v", status, err)
	}
	if err := b3.waitNoVNCConnected(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b3.clickCanvas(px, py); err != nil {
		t.Fatal(err)
	}
	b4 := newHostBrowser(t)
	if status, err := b4.open(streamURL(false).String()); err != nil || status != http.StatusOK {
		t.Fatalf("opening the interactive live view: status %d, %v", status, err)
	}
	if err := b4.waitNoVNCConnected(90 * time.Second); err != nil {
		t.Fatal(err)
	}
	if err := b4.clickCanvas(px, py); err != nil {
		t.Fatal(err)
	}
	var title string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		ws, err := d.Windows(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range ws {
			if strings.HasPrefix(w.Title, "clicks:") {
				title = w.Title
			}
		}
		if !strings.HasPrefix(title, "clicks:0") || time.Now().After(deadline) {
			break
		}
	}
	if !strings.HasPrefix(title, "clicks:1") {
		t.Errorf("after a view-only and an interactive click the page's title is %q; want clicks:1 (the interactive one only)", title)
	}
}

// rgbAt is the RGB of img at x, y.
func rgbAt(img image.Image, x, y int) [3]int {
	r, g, b, _ := img.At(x, y).RGBA()
	return [3]int{int(r >> 8), int(g >> 8), int(b >> 8)}
}
