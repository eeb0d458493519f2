package desktop

import (
	"bytes"
	"context"
	"image"
	"image/jpeg"
	"image/png"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func TestStartScreenshotClick(t *testing.T) {
	m := startDesktop(t, 1024, 768)
	d := m.Get()
	if d.State != api.DesktopRunning || d.Width != 1024 || d.Height != 768 || d.Processes["x"] == 0 || d.Processes["wm"] == 0 || d.Processes["vnc"] == 0 {
		t.Fatalf("desktop = %+v", d)
	}
	var buf bytes.Buffer
	sw, sh, iw, ih, format, err := m.Screenshot(&buf, api.ScreenshotOptions{})
	if err != nil {
		t.Fatal(err)
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
	if _, _, iw, ih, _, err = m.Screenshot(&buf, api.ScreenshotOptions{Format: "jpeg", Scale: "512x384"}); err != nil {
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
