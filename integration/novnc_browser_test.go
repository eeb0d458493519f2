package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// A headless Chromium on the host (Debian's chromium, installed by
// scripts/install-test-deps.sh), driven through the DevTools protocol with
// chromedp: the live-view tests open noVNC's page in it as a user's
// browser would, wait for noVNC to say it is connected, and read pixels
// of the canvas it draws the remote screen on.

// hostBrowser is one headless Chromium tab.
type hostBrowser struct {
	ctx context.Context
}

// newHostBrowser starts a headless Chromium for the test (ended with it).
// The window is larger than the test desktops, so noVNC's canvas shows the
// whole remote screen at scale 1.
func newHostBrowser(t *testing.T) *hostBrowser {
	t.Helper()
	return &hostBrowser{ctx: startChromium(t, 1400, 1000)}
}

// startChromium starts a headless host Chromium of a w x h window for the
// test (ended with it) and returns its tab's context.
func startChromium(t *testing.T, w, h int) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatal("chromium is not installed on the host: run scripts/install-test-deps.sh (make test does)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // the tests run as root
		chromedp.WindowSize(w, h),
		chromedp.Flag("user-data-dir", t.TempDir()),
	)
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); acancel() })
	// The first Run starts the browser and must have no deadline (it
	// would end the browser): it is bounded from here instead.
	started := make(chan error, 1)
	go func() {
		_, err := chromedp.Run(ctx, chromedp.Navigate("about:blank"))
		started <- err
	}()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("starting headless chromium: %v", err)
		}
	case <-time.After(90 * time.Second):
		t.Fatal("headless chromium did not start within 90 s")
	}
	return ctx
}

// eval evaluates a JavaScript expression in the tab, for at most bound.
func eval[T any](b *hostBrowser, bound time.Duration, expr string) (T, error) {
	ctx, cancel := context.WithTimeout(b.ctx, bound)
	defer cancel()
	return chromedp.Run(ctx, chromedp.Evaluate[T](expr))
}

// open navigates to url and returns the HTTP status of the page.
func (b *hostBrowser) open(url string) (int, error) {
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	if err != nil {
		return 0, err
	}
	return int(resp.Status), nil
}

// noVNCStatus is noVNC's status line (vnc.html's #noVNC_status), "" when
// the page has none.
func (b *hostBrowser) noVNCStatus() (string, error) {
	return eval[string](b, 10*time.Second, `(document.getElementById("noVNC_status") || {}).textContent || ""`)
}

// waitNoVNCConnected polls noVNC's status until it says it is connected
// and its canvas has the remote screen's size, for at most bound.
func (b *hostBrowser) waitNoVNCConnected(bound time.Duration) error {
	deadline := time.Now().Add(bound)
	var last string
	for {
		s, err := b.noVNCStatus()
		if err != nil {
			return err
		}
		last = s
		if strings.HasPrefix(s, "Connected") {
			size, err := eval[[]int](b, 10*time.Second,
				`(c => c ? [c.width, c.height] : [0, 0])(document.querySelector("#noVNC_container canvas"))`)
			if err != nil {
				return err
			}
			if len(size) == 2 && size[0] > 0 && size[1] > 0 {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("noVNC not connected within %v; its status: %q", bound, last)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// canvasPixel reads the RGB of noVNC's canvas at x, y (in the remote
// screen's pixels: the canvas keeps the framebuffer's size).
func (b *hostBrowser) canvasPixel(x, y int) ([3]int, error) {
	px, err := eval[[]int](b, 10*time.Second, fmt.Sprintf(
		`(c => c ? Array.from(c.getContext("2d").getImageData(%d, %d, 1, 1).data.slice(0, 3)) : [])(document.querySelector("#noVNC_container canvas"))`,
		x, y))
	if err != nil {
		return [3]int{}, err
	}
	if len(px) != 3 {
		return [3]int{}, fmt.Errorf("noVNC's page has no canvas")
	}
	return [3]int{px[0], px[1], px[2]}, nil
}

// clickCanvas clicks noVNC's canvas at x, y of the remote screen with a
// real (DevTools) mouse event at the point of the page where that pixel
// is drawn, whatever the canvas's scale.
func (b *hostBrowser) clickCanvas(x, y int) error {
	pt, err := eval[[]float64](b, 10*time.Second, fmt.Sprintf(
		`(c => { if (!c) return []; const r = c.getBoundingClientRect();
			return [r.left + (%d + 0.5) * r.width / c.width, r.top + (%d + 0.5) * r.height / c.height]; })(document.querySelector("#noVNC_container canvas"))`,
		x, y))
	if err != nil {
		return err
	}
	if len(pt) != 2 {
		return fmt.Errorf("noVNC's page has no canvas")
	}
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	_, err = chromedp.Run(ctx, chromedp.MouseClickXY(pt[0], pt[1]))
	return err
}

// daemonTCP listens on a loopback TCP port and relays each connection to
// the test daemon's socket (which listens on no TCP port), so that a
// browser reaches the preview proxy at http://PORT-ID.localhost:P/ (Chromium
// resolves *.localhost to loopback itself). It returns P.
func daemonTCP(t *testing.T) int {
	t.Helper()
	ln := serveTCP(t, "tcp", "127.0.0.1:0", func(c net.Conn) {
		go func() {
			defer c.Close()
			d, err := net.Dial("unix", env.cfg.Socket)
			if err != nil {
				fmt.Fprintf(os.Stderr, "daemonTCP: %v\n", err)
				return
			}
			defer d.Close()
			done := make(chan struct{})
			go func() {
				_, _ = io.Copy(d, c)
				if u, ok := d.(*net.UnixConn); ok {
					_ = u.CloseWrite()
				}
				close(done)
			}()
			_, _ = io.Copy(c, d)
			_ = c.Close()
			<-done
		}()
	})
	return ln.Addr().(*net.TCPAddr).Port
}
