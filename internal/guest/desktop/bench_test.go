package desktop

import (
	"math/rand/v2"

	"bytes"
	"context"
	"github.com/jezek/xgb/xproto"
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
	paintPage(b, m.x)
	return m
}

// paintPage draws a page-like picture on the root window: a white page
// with lines of dark "text" strokes, a colored header, buttons and a
// gradient image, so encoders see the kind of content agents look at.
func paintPage(b testing.TB, x *xconn) {
	const w, h = 1024, 768
	px := pagePixels()
	gc, _ := xproto.NewGcontextId(x.c)
	xproto.CreateGC(x.c, gc, xproto.Drawable(x.root), 0, nil)
	for y := 0; y < h; y += 50 {
		rows := min(50, h-y)
		err := xproto.PutImageChecked(x.c, xproto.ImageFormatZPixmap, xproto.Drawable(x.root), gc, w, uint16(rows), 0, int16(y), 0, x.depth, px[y*w*4:(y+rows)*w*4]).Check()
		if err != nil {
			b.Fatal(err)
		}
	}
}

// pagePixels is paintPage's picture as 1024x768 BGRX pixels.
func pagePixels() []byte {
	const w, h = 1024, 768
	px := make([]byte, w*h*4)
	set := func(x, y int, r, g, bl byte) {
		i := 4 * (y*w + x)
		px[i], px[i+1], px[i+2] = bl, g, r
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for y := range h {
		for x := range w {
			set(x, y, 255, 255, 255)
		}
	}
	for y := range 60 {
		for x := range w {
			set(x, y, 30, 80, byte(160+y))
		}
	}
	for line := 100; line+14 < 600; line += 22 {
		for x := 40; x < 700; {
			word := 10 + rng.IntN(50)
			for dx := range word {
				for dy := range 12 {
					if rng.IntN(3) == 0 {
						set(x+dx, line+dy, 20, 20, 20)
					}
				}
			}
			x += word + 6
		}
	}
	for y := 120; y < 420; y++ {
		for x := 760; x < 990; x++ {
			set(x, y, byte(x), byte(y), byte(x+y))
		}
	}
	for y := 640; y < 690; y++ {
		for x := 40; x < 240; x++ {
			set(x, y, 0, 120, 215)
		}
	}
	return px
}

// BenchmarkEncodePNG is the PNG encoder alone on the page's pixels (no X
// server needed).
func BenchmarkEncodePNG(b *testing.B) { benchEncodePNG(b, pagePixels()) }

// benchEncodePNG encodes 1024x768 BGRX pixels px with the agent's encoder.
func benchEncodePNG(b *testing.B, px []byte) {
	var e encoder
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if err := e.png(&buf, px, 1024, 768, 4096, true); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(buf.Len()), "bytes/image")
}

func BenchmarkScreenshotPNG(b *testing.B) {
	m := benchDesktop(b)
	var buf bytes.Buffer
	for b.Loop() {
		buf.Reset()
		if _, _, _, _, _, err := m.Screenshot(&buf, api.ScreenshotOptions{}, nil); err != nil {
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
		if _, _, _, _, _, err := m.Screenshot(&buf, api.ScreenshotOptions{Format: "jpeg"}, nil); err != nil {
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

// busyPixels is what make bench's busy page shows: a gradient under a
// canvas of coloured noise filling the top half.
func busyPixels() []byte {
	const w, h = 1024, 768
	px := make([]byte, w*h*4)
	s := uint32(1)
	for y := range h {
		for x := range w {
			i := 4 * (y*w + x)
			if y < h/2 {
				for c := range 3 {
					s = (s*1103515245 + 12345) & 0x7fffffff
					px[i+c] = byte(s >> 16)
				}
				continue
			}
			px[i], px[i+1], px[i+2] = byte(0x66-x*0x66/w), byte(0x33+x*(0xcc-0x33)/w), byte(x*0xff/w)
		}
	}
	return px
}

// BenchmarkEncodePNGBusy is the encoder on the busy page's pixels.
func BenchmarkEncodePNGBusy(b *testing.B) { benchEncodePNG(b, busyPixels()) }
