package desktop

import (
	"bytes"
	"context"
	"image/png"
	"io"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// The targets, at 1024x768: a PNG screenshot p50 under 30 ms, a
// one-click action batch p50 under 10 ms. These run against a real Xvfb
// on the host (go test -bench . ./internal/guest/desktop/); the screen
// shows a few windows' worth of varied pixels so the PNG is not all one
// color.

func benchDesktop(b *testing.B) *Manager {
	m := startDesktop(b, 1024, 768)
	if m.x.shmBuf == nil {
		b.Log("MIT-SHM is not in use: screenshots use the core GetImage")
	}
	return m
}

func BenchmarkScreenshotPNG(b *testing.B) {
	m := benchDesktop(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if _, _, _, _, _, err := m.Screenshot(&buf, api.ScreenshotOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/image")
}

func BenchmarkScreenshotJPEG(b *testing.B) {
	m := benchDesktop(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if _, _, _, _, _, err := m.Screenshot(&buf, api.ScreenshotOptions{Format: "jpeg"}); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/image")
}

// BenchmarkGrab is the grab alone (SHM), without encoding.
func BenchmarkGrab(b *testing.B) {
	m := benchDesktop(b)
	x := m.x
	for b.Loop() {
		x.shotMu.Lock()
		_, err := x.grab(rect{0, 0, 1024, 768})
		x.shotMu.Unlock()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPNGEncodeStd is image/png at BestSpeed on the same pixels, for
// comparison with the agent's encoder (BenchmarkScreenshotPNG).
func BenchmarkPNGEncodeStd(b *testing.B) {
	m := benchDesktop(b)
	x := m.x
	x.shotMu.Lock()
	px, err := x.grab(rect{0, 0, 1024, 768})
	if err != nil {
		b.Fatal(err)
	}
	img := x.enc.bgrxToRGBA(px, 1024, 768)
	x.shotMu.Unlock()
	enc := png.Encoder{CompressionLevel: png.BestSpeed}
	for b.Loop() {
		enc.Encode(io.Discard, img)
	}
}

func BenchmarkClick(b *testing.B) {
	m := benchDesktop(b)
	x, y := 500, 400
	req := api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionClick, X: &x, Y: &y}}}
	for b.Loop() {
		if _, err := m.Actions(context.Background(), req); err != nil {
			b.Fatal(err)
		}
	}
}
