package api

import "time"

// The desktop for computer-use agents: an X display in the sandbox (Xvfb,
// a window manager, x11vnc), run by the guest agent
// (internal/guest/desktop), which takes screenshots and sends mouse and
// keyboard input itself over one X connection (MIT-SHM and XTEST) rather
// than spawning xdotool or scrot per action. The live view is noVNC,
// served by the agent inside the sandbox and reached through the preview
// proxy with the sandbox's token.

// Desktop states.
const (
	DesktopStopped  = "stopped"
	DesktopStarting = "starting"
	DesktopRunning  = "running"
	DesktopFailed   = "failed"
)

// Desktop defaults and bounds.
const (
	DesktopDefaultWidth  = 1024
	DesktopDefaultHeight = 768
	DesktopDefaultDPI    = 96
	DesktopMaxSide       = 7680 // per side, in pixels
	// DesktopStreamPort is the sandbox port of the live view (noVNC and
	// its WebSocket), served by the guest agent on the sandbox's loopback.
	DesktopStreamPort = 6080
)

// StartDesktopRequest starts the display: POST /desktop. Starting a
// running desktop with the same size is a no-op; another size is a
// conflict (stop it first).
type StartDesktopRequest struct {
	Width  int `json:"width,omitempty"`  // default 1024
	Height int `json:"height,omitempty"` // default 768
	DPI    int `json:"dpi,omitempty"`    // default 96
}

// Desktop is the display's state: GET /desktop.
type Desktop struct {
	State   string `json:"state"`             // stopped, starting, running, failed
	Display string `json:"display,omitempty"` // ":0"
	Width   int    `json:"width,omitempty"`
	Height  int    `json:"height,omitempty"`
	DPI     int    `json:"dpi,omitempty"`
	// StreamPort is the sandbox port that serves the live view
	// (DesktopStreamPort); GET /desktop/stream gives its URL.
	StreamPort int        `json:"stream_port,omitempty"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	// Error says why the desktop failed, with the failing piece's last
	// stderr lines.
	Error string `json:"error,omitempty"`
	// Processes are the pids of the desktop's pieces by name (x, wm, vnc).
	Processes map[string]int `json:"processes,omitempty"`
	// VNCPassword and VNCViewPassword are x11vnc's passwords for the live
	// view, made by the agent at each start: the first can send input,
	// the second only watch (x11vnc enforces it). GET /desktop/stream
	// puts one of them in the noVNC URL it makes (password=).
	VNCPassword     string `json:"vnc_password,omitempty"`
	VNCViewPassword string `json:"vnc_view_password,omitempty"`
}

// Screenshot query parameters of GET /desktop/screenshot: format (png, the
// default, or jpeg), quality (jpeg, 1-100, default 80), scale (WxH, or a
// factor like 0.5), and a region x, y, w, h in screen pixels. The answer is
// the image; headers X-Screen-Width and X-Screen-Height give the screen's
// size, X-Image-Width and X-Image-Height the image's.
const (
	ScreenshotPNG  = "png"
	ScreenshotJPEG = "jpeg"
)

// Desktop action types.
const (
	ActionMove      = "move"
	ActionClick     = "click"
	ActionMouseDown = "mouse_down"
	ActionMouseUp   = "mouse_up"
	ActionDrag      = "drag"
	ActionScroll    = "scroll"
	ActionType      = "type"
	ActionKey       = "key"
	ActionWait      = "wait"
)

// Point is a screen position in pixels.
type Point struct {
	X int `json:"x"`
	Y int `json:"y"`
}

// DesktopAction is one step of POST /desktop/actions. Type picks which
// fields count:
//
//	move        x, y
//	click       x, y (optional: where the pointer is), button, double
//	mouse_down  button (at x, y when given)
//	mouse_up    button (at x, y when given)
//	drag        path (two or more points), button
//	scroll      x, y (optional), dx, dy (notches; positive dy scrolls down,
//	            positive dx right)
//	type        text (any Unicode)
//	key         keys: a chord like "ctrl+l", "Return", "ctrl+shift+t"
//	wait        ms (at most 60000)
type DesktopAction struct {
	Type string `json:"type"`
	X    *int   `json:"x,omitempty"`
	Y    *int   `json:"y,omitempty"`
	// Button is left (the default), right, middle, back or forward.
	Button string  `json:"button,omitempty"`
	Double bool    `json:"double,omitempty"`
	Path   []Point `json:"path,omitempty"`
	DX     int     `json:"dx,omitempty"`
	DY     int     `json:"dy,omitempty"`
	Text   string  `json:"text,omitempty"`
	Keys   string  `json:"keys,omitempty"`
	MS     int     `json:"ms,omitempty"`
}

// DesktopActionsRequest runs actions in order: POST /desktop/actions. The
// first failing action stops the batch; the error names its index.
type DesktopActionsRequest struct {
	Actions []DesktopAction `json:"actions"`
	// Screenshot, when set, takes a screenshot after the last action and
	// returns it in the answer.
	Screenshot *ScreenshotOptions `json:"screenshot,omitempty"`
}

// ScreenshotOptions are GET /desktop/screenshot's parameters as a body.
type ScreenshotOptions struct {
	Format  string  `json:"format,omitempty"`  // png (default) or jpeg
	Quality int     `json:"quality,omitempty"` // jpeg, 1-100
	Scale   string  `json:"scale,omitempty"`   // "WxH" or a factor
	Region  *Region `json:"region,omitempty"`
}

// Region is a rectangle of the screen.
type Region struct {
	X int `json:"x"`
	Y int `json:"y"`
	W int `json:"w"`
	H int `json:"h"`
}

// DesktopActionsResult is the answer of POST /desktop/actions.
type DesktopActionsResult struct {
	Cursor Point `json:"cursor"`
	// Screenshot is there when the request asked for one.
	Screenshot *ScreenshotData `json:"screenshot,omitempty"`
}

// ScreenshotData is an image inside a JSON answer.
type ScreenshotData struct {
	Format string `json:"format"`
	Width  int    `json:"width"`
	Height int    `json:"height"`
	Data   []byte `json:"data"` // base64 in JSON
}

// DesktopWindow is one top-level window: GET /desktop/windows.
type DesktopWindow struct {
	ID      uint32 `json:"id"`
	Title   string `json:"title"`
	App     string `json:"app,omitempty"` // WM_CLASS's class
	Pid     int    `json:"pid,omitempty"`
	X       int    `json:"x"`
	Y       int    `json:"y"`
	Width   int    `json:"width"`
	Height  int    `json:"height"`
	Focused bool   `json:"focused"`
}

// DesktopWindowList is the answer of GET /desktop/windows.
type DesktopWindowList struct {
	Windows []DesktopWindow `json:"windows"`
}

// DesktopLaunchRequest starts a program on the display: POST
// /desktop/launch. App is a known name (chromium, terminal) or Cmd an
// argv; the process is a background process (GET /processes) with
// DISPLAY set.
type DesktopLaunchRequest struct {
	App string            `json:"app,omitempty"`
	Cmd []string          `json:"cmd,omitempty"`
	Env map[string]string `json:"env,omitempty"`
	Cwd string            `json:"cwd,omitempty"`
}

// DesktopOpenRequest opens a URL in Chromium: POST /desktop/open.
type DesktopOpenRequest struct {
	URL string `json:"url"`
}

// DesktopStream is the answer of GET /desktop/stream?view_only=true|false:
// the live view's URL, through the preview proxy, carrying the sandbox's
// preview token. View-only (the default) is enforced in the sandbox, not
// only by the page.
type DesktopStream struct {
	URL      string `json:"url"`
	ViewOnly bool   `json:"view_only"`
}
