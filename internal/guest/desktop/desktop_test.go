package desktop

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"regexp"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestStartScreenshotClick(t *testing.T) {
	m := startDesktop(t, 1024, 768)
	d := m.Get()
	if d.State != api.DesktopRunning || d.Width != 1024 || d.Height != 768 || d.Processes["x"] == 0 || d.Processes["wm"] == 0 || d.Processes["vnc"] == 0 {
		t.Fatalf("desktop = %+v", d)
	}
	var buf bytes.Buffer
	var timing shotTiming
	sw, sh, iw, ih, format, err := m.Screenshot(&buf, api.ScreenshotOptions{}, &timing)
	if err != nil {
		t.Fatal(err)
	}
	if timing.grab <= 0 || timing.encode <= 0 || !regexp.MustCompile(`^wait;dur=[0-9.]+, grab;dur=[0-9.]+, encode;dur=[0-9.]+$`).MatchString(timing.header()) {
		t.Errorf("timing %+v, Server-Timing %q", timing, timing.header())
	}
	if sw != 1024 || sh != 768 || iw != 1024 || ih != 768 || format != "png" {
		t.Errorf("screenshot sizes %dx%d %dx%d %s", sw, sh, iw, ih, format)
	}
	img, err := png.Decode(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if img.Bounds() != image.Rect(0, 0, 1024, 768) {
		t.Errorf("png bounds %v", img.Bounds())
	}
	buf.Reset()
	if _, _, iw, ih, _, err = m.Screenshot(&buf, api.ScreenshotOptions{Format: "jpeg", Scale: "512x384"}, nil); err != nil {
		t.Fatal(err)
	}
	if img, err := jpeg.Decode(&buf); err != nil || img.Bounds() != image.Rect(0, 0, 512, 384) || iw != 512 || ih != 384 {
		t.Errorf("jpeg: %v, %v, %dx%d", err, img.Bounds(), iw, ih)
	}
	res, err := m.Actions(context.Background(), api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionClick, X: new(100), Y: new(200)}}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Cursor != (api.Point{X: 100, Y: 200}) {
		t.Errorf("cursor after the click %+v, want 100,200", res.Cursor)
	}
}

// TestScreenshotPixels paints a page on the root window and checks that
// the PNG (the agent's own encoder) and a region of it decode to exactly
// the painted pixels.
func TestScreenshotPixels(t *testing.T) {
	m := startDesktop(t, 1024, 768)
	paintPage(t, m.x)
	m.x.shotMu.Lock()
	px, err := m.x.grab(rect{0, 0, 1024, 768})
	want := append([]byte(nil), px...)
	m.x.shotMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	check := func(name string, o api.ScreenshotOptions, r rect) {
		var buf bytes.Buffer
		if _, _, _, _, _, err := m.Screenshot(&buf, o, nil); err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(&buf)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if img.Bounds() != image.Rect(0, 0, r.W, r.H) {
			t.Fatalf("%s: bounds %v", name, img.Bounds())
		}
		for y := range r.H {
			for x := range r.W {
				i := 4 * ((r.Y+y)*1024 + r.X + x)
				cr, cg, cb, _ := img.At(x, y).RGBA()
				if byte(cr>>8) != want[i+2] || byte(cg>>8) != want[i+1] || byte(cb>>8) != want[i] {
					t.Fatalf("%s: pixel %d,%d is %d,%d,%d, want %d,%d,%d", name, x, y, cr>>8, cg>>8, cb>>8, want[i+2], want[i+1], want[i])
				}
			}
		}
	}
	check("full", api.ScreenshotOptions{}, rect{0, 0, 1024, 768})
	check("region", api.ScreenshotOptions{Region: &api.Region{X: 700, Y: 100, W: 300, H: 200}}, rect{700, 100, 300, 200})
}

// stuckProc never ends.
type stuckProc struct{ Proc }

func (stuckProc) Done() <-chan struct{} { return nil }

// TestWaitAllOneDeadline: two processes that ignore SIGTERM cost the
// teardown one grace period, not a wait forever on the second.
func TestWaitAllOneDeadline(t *testing.T) {
	start := time.Now()
	done := make(chan struct{})
	go func() {
		waitAll([]Proc{stuckProc{}, stuckProc{}, stuckProc{}}, 50*time.Millisecond)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("waitAll still waits 10 s after its 50 ms limit")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Errorf("waitAll returned after %v, before its limit", d)
	}
}
