package desktop

import (
	"bytes"
	"io"
	"math"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

type bytesBuffer = bytes.Buffer

// rect is a region of the screen.
type rect struct{ X, Y, W, H int }

// shotOptions is a checked screenshot request.
type shotOptions struct {
	format  string
	quality int
	region  rect
	// outW, outH: the image's size (the region's unless scaled).
	outW, outH int
}

// parseShotOptions checks o against a w x h screen.
func parseShotOptions(o api.ScreenshotOptions, w, h int) (shotOptions, error) {
	s := shotOptions{format: o.Format, quality: o.Quality, region: rect{0, 0, w, h}}
	switch s.format {
	case "":
		s.format = api.ScreenshotPNG
	case api.ScreenshotPNG, api.ScreenshotJPEG:
	case "jpg":
		s.format = api.ScreenshotJPEG
	default:
		return s, errdefs.Invalid("format %q: want png or jpeg", o.Format)
	}
	if s.quality == 0 {
		s.quality = 80
	}
	if s.quality < 1 || s.quality > 100 {
		return s, errdefs.Invalid("quality must be between 1 and 100, got %d", o.Quality)
	}
	if r := o.Region; r != nil {
		if r.W <= 0 || r.H <= 0 || r.X < 0 || r.Y < 0 || r.X+r.W > w || r.Y+r.H > h {
			return s, errdefs.Invalid("region x=%d y=%d w=%d h=%d is not inside the %dx%d screen", r.X, r.Y, r.W, r.H, w, h)
		}
		s.region = rect{r.X, r.Y, r.W, r.H}
	}
	s.outW, s.outH = s.region.W, s.region.H
	if sc := strings.TrimSpace(o.Scale); sc != "" {
		if a, b, ok := strings.Cut(sc, "x"); ok {
			sw, err1 := strconv.Atoi(a)
			sh, err2 := strconv.Atoi(b)
			if err1 != nil || err2 != nil || sw < 1 || sh < 1 || sw > api.DesktopMaxSide || sh > api.DesktopMaxSide {
				return s, errdefs.Invalid("scale %q: want WxH (each 1-%d) or a factor like 0.5", sc, api.DesktopMaxSide)
			}
			s.outW, s.outH = sw, sh
		} else {
			f, err := strconv.ParseFloat(sc, 64)
			if err != nil || math.IsNaN(f) || f <= 0 || f > 4 {
				return s, errdefs.Invalid("scale %q: want a factor above 0 and at most 4, or WxH", sc)
			}
			s.outW = max(1, int(math.Round(float64(s.region.W)*f)))
			s.outH = max(1, int(math.Round(float64(s.region.H)*f)))
			if s.outW > api.DesktopMaxSide || s.outH > api.DesktopMaxSide {
				return s, errdefs.Invalid("scale %q makes a %dx%d image; at most %d a side", sc, s.outW, s.outH, api.DesktopMaxSide)
			}
		}
	}
	return s, nil
}

// queryShotOptions reads GET /desktop/screenshot's query.
func queryShotOptions(q url.Values) (api.ScreenshotOptions, error) {
	o := api.ScreenshotOptions{Format: q.Get("format"), Scale: q.Get("scale")}
	num := func(name string) (int, bool, error) {
		v := q.Get(name)
		if v == "" {
			return 0, false, nil
		}
		n, err := strconv.Atoi(v)
		if err != nil {
			return 0, false, errdefs.Invalid("%s=%q is not a whole number", name, v)
		}
		return n, true, nil
	}
	var err error
	if o.Quality, _, err = num("quality"); err != nil {
		return o, err
	}
	var r api.Region
	var any bool
	for _, f := range []struct {
		name string
		p    *int
	}{{"x", &r.X}, {"y", &r.Y}, {"w", &r.W}, {"h", &r.H}} {
		n, ok, err := num(f.name)
		if err != nil {
			return o, err
		}
		*f.p = n
		any = any || ok
	}
	if any {
		if r.W == 0 || r.H == 0 {
			return o, errdefs.Invalid("a region needs w and h (and x, y: default 0)")
		}
		o.Region = &r
	}
	return o, nil
}

// shotTiming is where a screenshot's time went: the wait for another
// screenshot, the X server's copy of the pixels, the encoding.
type shotTiming struct{ wait, grab, encode time.Duration }

// header is the value of a Server-Timing response header (W3C Server
// Timing: durations in milliseconds), which the daemon passes on.
func (t shotTiming) header() string {
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d.Microseconds())/1000, 'f', 2, 64) }
	return "wait;dur=" + ms(t.wait) + ", grab;dur=" + ms(t.grab) + ", encode;dur=" + ms(t.encode)
}

// screenshot grabs and encodes an image into out, returning its size;
// t, when not nil, gets where the time went.
func (x *xconn) screenshot(out io.Writer, o shotOptions, t *shotTiming) (int, int, error) {
	if t == nil {
		t = new(shotTiming)
	}
	start := time.Now()
	x.shotMu.Lock()
	defer x.shotMu.Unlock()
	locked := time.Now()
	t.wait = locked.Sub(start)
	px, err := x.grab(o.region)
	if err != nil {
		return 0, 0, err
	}
	grabbed := time.Now()
	t.grab = grabbed.Sub(locked)
	defer func() { t.encode = time.Since(grabbed) }()
	w, h := o.region.W, o.region.H
	scaled := o.outW != w || o.outH != h
	if o.format == api.ScreenshotPNG && !scaled {
		return w, h, x.enc.png(out, px, w, h, 4*w, true)
	}
	img := x.enc.bgrxToRGBA(px, w, h)
	if scaled {
		img = x.enc.scale(img, o.outW, o.outH)
	}
	if o.format == api.ScreenshotPNG {
		return o.outW, o.outH, x.enc.png(out, img.Pix, o.outW, o.outH, img.Stride, false)
	}
	return o.outW, o.outH, x.enc.jpeg(out, img, o.quality)
}

// Screenshot writes an image of the screen to out; it returns the
// screen's size and the image's. t, when not nil, gets where the time
// went.
func (m *Manager) Screenshot(out io.Writer, o api.ScreenshotOptions, t *shotTiming) (screenW, screenH, imgW, imgH int, format string, err error) {
	x, err := m.conn()
	if err != nil {
		return 0, 0, 0, 0, "", err
	}
	so, err := parseShotOptions(o, x.width, x.height)
	if err != nil {
		return 0, 0, 0, 0, "", err
	}
	iw, ih, err := x.screenshot(out, so, t)
	return x.width, x.height, iw, ih, so.format, err
}
