package client

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/api"
)

// Desktop is a sandbox's desktop for computer-use agents (docs/desktop.md):
// an X display with a window manager and a live view, driven by
// screenshots and mouse and keyboard actions. Get one with
// Client.Desktop; it holds no state but the sandbox's id.
type Desktop struct {
	c  *Client
	id string
}

// Desktop returns the desktop of sandbox id. Nothing is sent until a
// method is called; Start starts the display.
func (c *Client) Desktop(id string) *Desktop { return &Desktop{c: c, id: id} }

func (d *Desktop) path(rest string) string { return sandboxPath(d.id, "/desktop"+rest) }

// Start starts the display (idempotent for the same size; zero fields
// take the defaults, 1024x768 at 96 dpi) and returns it once it is ready.
func (d *Desktop) Start(ctx context.Context, req api.StartDesktopRequest) (*api.Desktop, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	var out api.Desktop
	if err := d.c.doJSON(ctx, "POST", d.path(""), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Status returns the display's state (stopped when it never started).
func (d *Desktop) Status(ctx context.Context) (*api.Desktop, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	var out api.Desktop
	if err := d.c.doJSON(ctx, "GET", d.path(""), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Stop stops the display and the programs launched on it.
func (d *Desktop) Stop(ctx context.Context) error {
	if err := checkID(d.id); err != nil {
		return err
	}
	return d.c.doJSON(ctx, "DELETE", d.path(""), nil, nil, nil)
}

// Screenshot is an image of the display.
type Screenshot struct {
	Format string // png or jpeg
	Data   []byte
	// Width and Height are the image's; ScreenWidth and ScreenHeight the
	// screen's (they differ when the image was scaled or is a region).
	Width, Height             int
	ScreenWidth, ScreenHeight int
}

// ScreenshotQuery is o as GET /desktop/screenshot's query.
func ScreenshotQuery(o api.ScreenshotOptions) url.Values {
	q := url.Values{}
	if o.Format != "" {
		q.Set("format", o.Format)
	}
	if o.Quality != 0 {
		q.Set("quality", strconv.Itoa(o.Quality))
	}
	if o.Scale != "" {
		q.Set("scale", o.Scale)
	}
	if r := o.Region; r != nil {
		q.Set("x", strconv.Itoa(r.X))
		q.Set("y", strconv.Itoa(r.Y))
		q.Set("w", strconv.Itoa(r.W))
		q.Set("h", strconv.Itoa(r.H))
	}
	return q
}

// Screenshot takes a screenshot: PNG by default, JPEG with o.Format,
// scaled (o.Scale "WxH" or a factor) and of a region when asked.
func (d *Desktop) Screenshot(ctx context.Context, o api.ScreenshotOptions) (*Screenshot, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	req, err := d.c.newRequest(ctx, "GET", d.path("/screenshot"), ScreenshotQuery(o), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "image/png, image/jpeg, application/json")
	resp, err := d.c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, fmt.Errorf("reading the screenshot: %w", err)
	}
	s := &Screenshot{Format: api.ScreenshotPNG, Data: data}
	if resp.Header.Get("Content-Type") == "image/jpeg" {
		s.Format = api.ScreenshotJPEG
	}
	s.Width, _ = strconv.Atoi(resp.Header.Get("X-Image-Width"))
	s.Height, _ = strconv.Atoi(resp.Header.Get("X-Image-Height"))
	s.ScreenWidth, _ = strconv.Atoi(resp.Header.Get("X-Screen-Width"))
	s.ScreenHeight, _ = strconv.Atoi(resp.Header.Get("X-Screen-Height"))
	return s, nil
}

// Actions runs actions in order (the first failing one stops the batch)
// and returns where the pointer ended, with a screenshot after the last
// action when req.Screenshot is set.
func (d *Desktop) Actions(ctx context.Context, req api.DesktopActionsRequest) (*api.DesktopActionsResult, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	if req.Actions == nil {
		req.Actions = []api.DesktopAction{}
	}
	var out api.DesktopActionsResult
	if err := d.c.doJSON(ctx, "POST", d.path("/actions"), nil, req, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// do runs one action.
func (d *Desktop) do(ctx context.Context, a api.DesktopAction) error {
	_, err := d.Actions(ctx, api.DesktopActionsRequest{Actions: []api.DesktopAction{a}})
	return err
}

// Click clicks button ("" is left; right, middle, back, forward) at x, y,
// twice when double.
func (d *Desktop) Click(ctx context.Context, x, y int, button string, double bool) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionClick, X: &x, Y: &y, Button: button, Double: double})
}

// Move moves the pointer to x, y.
func (d *Desktop) Move(ctx context.Context, x, y int) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionMove, X: &x, Y: &y})
}

// Drag presses the left button at the path's first point, moves through
// the others and releases it at the last.
func (d *Desktop) Drag(ctx context.Context, path []api.Point) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionDrag, Path: path})
}

// Scroll scrolls dx, dy notches (positive dy down, positive dx right)
// with the pointer at x, y.
func (d *Desktop) Scroll(ctx context.Context, x, y, dx, dy int) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionScroll, X: &x, Y: &y, DX: dx, DY: dy})
}

// Type types text, any Unicode, into the focused window.
func (d *Desktop) Type(ctx context.Context, text string) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionType, Text: text})
}

// Press presses a key or a chord: "Return", "ctrl+l", "ctrl+shift+t".
func (d *Desktop) Press(ctx context.Context, keys string) error {
	return d.do(ctx, api.DesktopAction{Type: api.ActionKey, Keys: keys})
}

// Cursor returns the pointer's position.
func (d *Desktop) Cursor(ctx context.Context) (api.Point, error) {
	var p api.Point
	if err := checkID(d.id); err != nil {
		return p, err
	}
	err := d.c.doJSON(ctx, "GET", d.path("/cursor"), nil, nil, &p)
	return p, err
}

// Windows returns the top-level windows: id, title, app, geometry and
// which has the focus.
func (d *Desktop) Windows(ctx context.Context) ([]api.DesktopWindow, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	var out api.DesktopWindowList
	if err := d.c.doJSON(ctx, "GET", d.path("/windows"), nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Windows, nil
}

// Launch starts a program on the display (req.App: chromium, terminal;
// or req.Cmd) as a background process.
func (d *Desktop) Launch(ctx context.Context, req api.DesktopLaunchRequest) (*api.Process, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	var p api.Process
	if err := d.c.doJSON(ctx, "POST", d.path("/launch"), nil, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Open opens rawURL in Chromium on the display.
func (d *Desktop) Open(ctx context.Context, rawURL string) (*api.Process, error) {
	if err := checkID(d.id); err != nil {
		return nil, err
	}
	var p api.Process
	if err := d.c.doJSON(ctx, "POST", d.path("/open"), nil, api.DesktopOpenRequest{URL: rawURL}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// StreamURL returns the live view's URL (noVNC through the preview
// proxy, with the sandbox's token): view-only unless viewOnly is false.
// Anyone holding the URL can watch (or, interactive, drive) the desktop.
func (d *Desktop) StreamURL(ctx context.Context, viewOnly bool) (string, error) {
	if err := checkID(d.id); err != nil {
		return "", err
	}
	var s api.DesktopStream
	q := url.Values{"view_only": {strconv.FormatBool(viewOnly)}}
	if err := d.c.doJSON(ctx, "GET", d.path("/stream"), q, nil, &s); err != nil {
		return "", err
	}
	return s.URL, nil
}
