package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

const desktopScreenshotDescription = "Take a screenshot of the sandbox's desktop and return it as a PNG image, " +
	"with the screen's size in pixels (the coordinates desktop_action takes). The display starts on first use " +
	"(1024x768) in a sandbox made from a template with a desktop, such as `desktop`; other sandboxes get an error saying so."

const desktopActionDescription = "Drive the sandbox's desktop with the mouse and keyboard: a list of actions done in order " +
	"(the first that fails stops the rest), optionally followed by a screenshot. Coordinates are screen pixels, " +
	"as in desktop_screenshot. Actions: move {x, y}; click {x, y (optional: where the pointer is), button, double}; " +
	"mouse_down and mouse_up {button, x, y}; drag {path: two or more points}; scroll {x, y, dx, dy: notches, positive dy down}; " +
	"type {text}; key {keys: a chord such as \"ctrl+l\", \"Return\", \"ctrl+shift+t\"}; wait {ms, at most 60000}."

type (
	desktopShotArgs struct {
		SandboxID string `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Scale     string `json:"scale,omitempty" jsonschema:"shrink the image: a factor such as 0.5, or WxH; default full size"`
	}
	desktopActionArgs struct {
		SandboxID  string          `json:"sandbox_id" jsonschema:"the sandbox's id"`
		Actions    []desktopAction `json:"actions,omitempty" jsonschema:"the actions, in order"`
		Action     *desktopAction  `json:"action,omitempty" jsonschema:"one action, for a single step (or use actions)"`
		Screenshot bool            `json:"screenshot,omitempty" jsonschema:"return a screenshot taken after the last action"`
	}
	desktopAction struct {
		Type   string      `json:"type" jsonschema:"move, click, mouse_down, mouse_up, drag, scroll, type, key or wait"`
		X      *int        `json:"x,omitempty" jsonschema:"screen x in pixels"`
		Y      *int        `json:"y,omitempty" jsonschema:"screen y in pixels"`
		Button string      `json:"button,omitempty" jsonschema:"left (the default), right, middle, back or forward"`
		Double bool        `json:"double,omitempty" jsonschema:"click: a double click"`
		Path   []api.Point `json:"path,omitempty" jsonschema:"drag: two or more points"`
		DX     int         `json:"dx,omitempty" jsonschema:"scroll: notches right (negative: left)"`
		DY     int         `json:"dy,omitempty" jsonschema:"scroll: notches down (negative: up)"`
		Text   string      `json:"text,omitempty" jsonschema:"type: the text, any Unicode"`
		Keys   string      `json:"keys,omitempty" jsonschema:"key: a chord such as ctrl+l or Return"`
		MS     int         `json:"ms,omitempty" jsonschema:"wait: milliseconds"`
	}
)

// onDesktop runs do against the sandbox's display and, when the display
// is not running (the guest answers a failed precondition), starts it and
// runs do again, so that an MCP client needs no tool of its own for that
// and a call on a running display costs no extra round trip. A sandbox
// whose template has no desktop gets an error naming the template to use.
func (t *tools) onDesktop(ctx context.Context, id string, do func() error) error {
	err := do()
	if !errors.Is(err, errdefs.ErrFailedPrecondition) {
		return err
	}
	if _, err := t.c.Desktop(id).Start(ctx, api.StartDesktopRequest{}); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
		// (AlreadyExists: another client started it meanwhile, at another size.)
		template := "?"
		if sb, gerr := t.c.GetSandbox(ctx, id); gerr == nil {
			template = sb.Template
		}
		return fmt.Errorf("sandbox %s (template %s) has no working desktop: %w; sandboxes made from the %q template have one (sandbox_create with template %q)",
			id, template, err, "desktop", "desktop")
	}
	return do()
}

func (t *tools) desktopScreenshot(ctx context.Context, _ *mcp.CallToolRequest, in desktopShotArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	var shot *client.Screenshot
	if err := t.onDesktop(ctx, in.SandboxID, func() (err error) {
		shot, err = t.c.Desktop(in.SandboxID).Screenshot(ctx, api.ScreenshotOptions{Scale: in.Scale})
		return err
	}); err != nil {
		return apiError(err)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{
		&mcp.ImageContent{Data: shot.Data, MIMEType: "image/" + shot.Format},
		&mcp.TextContent{Text: shotCaption(shot.Width, shot.Height, shot.ScreenWidth, shot.ScreenHeight)},
	}}, nil, nil
}

// shotCaption says an image's size and, when it was scaled, the screen's,
// which is what action coordinates are in.
func shotCaption(w, h, sw, sh int) string {
	if w == sw && h == sh {
		return fmt.Sprintf("screen %dx%d pixels", sw, sh)
	}
	return fmt.Sprintf("image %dx%d of a screen %dx%d pixels (actions take screen pixels)", w, h, sw, sh)
}

func (t *tools) desktopAction(ctx context.Context, _ *mcp.CallToolRequest, in desktopActionArgs) (*mcp.CallToolResult, any, error) {
	if err := needID(in.SandboxID); err != nil {
		return apiError(err)
	}
	steps := in.Actions
	if in.Action != nil {
		steps = append([]desktopAction{*in.Action}, steps...)
	}
	if len(steps) == 0 {
		return failed("no action given: pass actions, a list such as [{\"type\":\"click\",\"x\":100,\"y\":200}], or action, one of them"), nil, nil
	}
	req := api.DesktopActionsRequest{Actions: make([]api.DesktopAction, len(steps))}
	for i, a := range steps {
		req.Actions[i] = api.DesktopAction{Type: a.Type, X: a.X, Y: a.Y, Button: a.Button, Double: a.Double, Path: a.Path,
			DX: a.DX, DY: a.DY, Text: a.Text, Keys: a.Keys, MS: a.MS}
	}
	if in.Screenshot {
		req.Screenshot = &api.ScreenshotOptions{}
	}
	var res *api.DesktopActionsResult
	if err := t.onDesktop(ctx, in.SandboxID, func() (err error) {
		res, err = t.c.Desktop(in.SandboxID).Actions(ctx, req)
		return err
	}); err != nil {
		return apiError(err)
	}
	var names []string
	for _, a := range steps {
		names = append(names, a.Type)
	}
	r := text("done: %s; the pointer is at %d,%d", strings.Join(names, ", "), res.Cursor.X, res.Cursor.Y)
	if s := res.Screenshot; s != nil {
		r.Content = append(r.Content, &mcp.ImageContent{Data: s.Data, MIMEType: "image/" + s.Format})
	}
	return r, nil, nil
}
