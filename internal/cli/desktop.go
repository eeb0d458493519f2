package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// newDesktopCommand is `agentbox desktop VERB ID ...`: the desktop for
// computer-use agents (docs/desktop.md).
func newDesktopCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "desktop",
		Short: "Drive a sandbox's desktop: screenshots, mouse, keyboard, live view",
		Long: `A sandbox's X desktop (the desktop template): start it, take screenshots,
click, type and press keys, list windows, launch programs and get the live
view's URL. See docs/desktop.md.

  agentbox desktop start ID
  agentbox desktop open ID https://example.org/
  agentbox desktop screenshot ID > shot.png
  agentbox desktop click ID 200 150
  agentbox desktop type ID 'hello'
  agentbox desktop key ID ctrl+l
  agentbox desktop url ID`,
	}
	// run wraps a verb: its client and the sandbox's desktop.
	run := func(fn func(c *cobra.Command, d *client.Desktop, args []string) error) func(*cobra.Command, []string) error {
		return func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			return fn(c, cl.Desktop(args[0]), args[1:])
		}
	}

	var width, height, dpi int
	start := &cobra.Command{
		Use:   "start [--width W] [--height H] [--dpi D] ID",
		Short: "Start the display (Xvfb, openbox, x11vnc); a no-op when it runs",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			st, err := d.Start(c.Context(), api.StartDesktopRequest{Width: width, Height: height, DPI: dpi})
			if err != nil {
				return err
			}
			return printDesktop(c.OutOrStdout(), st)
		}),
	}
	start.Flags().IntVar(&width, "width", 0, "screen width in pixels (default 1024)")
	start.Flags().IntVar(&height, "height", 0, "screen height in pixels (default 768)")
	start.Flags().IntVar(&dpi, "dpi", 0, "screen resolution (default 96)")

	status := &cobra.Command{
		Use:   "status ID",
		Short: "Print the display's state",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			st, err := d.Status(c.Context())
			if err != nil {
				return err
			}
			return printDesktop(c.OutOrStdout(), st)
		}),
	}
	stop := &cobra.Command{
		Use:   "stop ID",
		Short: "Stop the display and the programs launched on it",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			return d.Stop(c.Context())
		}),
	}

	var opts api.ScreenshotOptions
	var region, outFile string
	screenshot := &cobra.Command{
		Use:   "screenshot [--format png|jpeg] [--quality Q] [--scale WxH|F] [--region X,Y,W,H] [-o FILE] ID",
		Short: "Write a screenshot to stdout (or -o FILE)",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			if region != "" {
				n, err := ints("--region", region, 4)
				if err != nil {
					return err
				}
				opts.Region = &api.Region{X: n[0], Y: n[1], W: n[2], H: n[3]}
			}
			out := c.OutOrStdout()
			if outFile == "" {
				if f, ok := out.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
					return usageErrorf("a screenshot is binary: redirect stdout (> shot.png) or give -o FILE")
				}
			}
			s, err := d.Screenshot(c.Context(), opts)
			if err != nil {
				return err
			}
			if outFile != "" {
				return os.WriteFile(outFile, s.Data, 0o644)
			}
			_, err = out.Write(s.Data)
			return err
		}),
	}
	screenshot.Flags().StringVar(&opts.Format, "format", "", "png (default) or jpeg")
	screenshot.Flags().IntVar(&opts.Quality, "quality", 0, "JPEG quality 1-100 (default 80)")
	screenshot.Flags().StringVar(&opts.Scale, "scale", "", `the image's size, "512x384" or a factor like "0.5"`)
	screenshot.Flags().StringVar(&region, "region", "", "only this rectangle of the screen: X,Y,W,H")
	screenshot.Flags().StringVarP(&outFile, "output", "o", "", "write the image to FILE")

	var button string
	var double bool
	click := &cobra.Command{
		Use:   "click [--button left|right|middle|back|forward] [--double] ID X Y",
		Short: "Click at X, Y",
		Args:  exactArgs(3),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			p, err := point(args[0], args[1])
			if err != nil {
				return err
			}
			return d.Click(c.Context(), p.X, p.Y, button, double)
		}),
	}
	click.Flags().StringVar(&button, "button", "", "mouse button (default left)")
	click.Flags().BoolVar(&double, "double", false, "double click")

	move := &cobra.Command{
		Use:   "move ID X Y",
		Short: "Move the pointer to X, Y",
		Args:  exactArgs(3),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			p, err := point(args[0], args[1])
			if err != nil {
				return err
			}
			return d.Move(c.Context(), p.X, p.Y)
		}),
	}
	drag := &cobra.Command{
		Use:   "drag ID X1 Y1 X2 Y2 [X Y]...",
		Short: "Drag with the left button along a path of points",
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 5 || len(args)%2 != 1 {
				return usageErrorf("drag wants a sandbox id and two or more X Y points: %s", c.UseLine())
			}
			return nil
		},
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			var path []api.Point
			for i := 0; i < len(args); i += 2 {
				p, err := point(args[i], args[i+1])
				if err != nil {
					return err
				}
				path = append(path, p)
			}
			return d.Drag(c.Context(), path)
		}),
	}
	scroll := &cobra.Command{
		Use:   "scroll ID X Y DX DY",
		Short: "Scroll DX, DY notches at X, Y (positive DY scrolls down)",
		Args:  exactArgs(5),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			n, err := ints("X Y DX DY", strings.Join(args, ","), 4)
			if err != nil {
				return err
			}
			return d.Scroll(c.Context(), n[0], n[1], n[2], n[3])
		}),
	}
	typeText := &cobra.Command{
		Use:   "type ID TEXT",
		Short: "Type TEXT (any Unicode) into the focused window",
		Args:  exactArgs(2),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			return d.Type(c.Context(), args[0])
		}),
	}
	key := &cobra.Command{
		Use:   "key ID KEYS",
		Short: `Press a key or a chord: "Return", "ctrl+l", "ctrl+shift+t"`,
		Args:  exactArgs(2),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			return d.Press(c.Context(), args[0])
		}),
	}
	var shotAfter string
	actions := &cobra.Command{
		Use:   "actions [--screenshot FILE] ID [FILE | -]",
		Short: "Run a JSON list of actions (or a DesktopActionsRequest) in order",
		Long: `Run actions read from FILE or stdin: a JSON list of actions, or an object
{"actions": [...], "screenshot": {...}} (api/openapi.yaml,
DesktopActionsRequest). Prints the pointer's position; with --screenshot
FILE the screenshot taken after the last action is written there.

  echo '[{"type":"click","x":10,"y":20},{"type":"type","text":"hi"}]' |
    agentbox desktop actions ID -`,
		Args: func(c *cobra.Command, args []string) error {
			if len(args) < 1 || len(args) > 2 {
				return usageErrorf("actions wants a sandbox id and at most one file: %s", c.UseLine())
			}
			return nil
		},
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			var b []byte
			var err error
			if len(args) == 0 || args[0] == "-" {
				b, err = io.ReadAll(c.InOrStdin())
			} else {
				b, err = os.ReadFile(args[0])
			}
			if err != nil {
				return fmt.Errorf("reading the actions: %w", err)
			}
			req, err := parseActions(b)
			if err != nil {
				return err
			}
			if shotAfter != "" && req.Screenshot == nil {
				req.Screenshot = &api.ScreenshotOptions{}
			}
			res, err := d.Actions(c.Context(), req)
			if err != nil {
				return err
			}
			if shotAfter != "" && res.Screenshot != nil {
				if err := os.WriteFile(shotAfter, res.Screenshot.Data, 0o644); err != nil {
					return err
				}
			}
			fmt.Fprintf(c.OutOrStdout(), "cursor %d %d\n", res.Cursor.X, res.Cursor.Y)
			return nil
		}),
	}
	actions.Flags().StringVar(&shotAfter, "screenshot", "", "take a screenshot after the last action and write it to FILE")

	var asJSON bool
	windows := &cobra.Command{
		Use:   "windows [--json] ID",
		Short: "List the top-level windows: id, focus, geometry, app, title",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			ws, err := d.Windows(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), api.DesktopWindowList{Windows: ws})
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tFOCUS\tGEOMETRY\tAPP\tTITLE")
			for _, w := range ws {
				focus := ""
				if w.Focused {
					focus = "*"
				}
				fmt.Fprintf(tw, "0x%x\t%s\t%dx%d+%d+%d\t%s\t%s\n", w.ID, focus, w.Width, w.Height, w.X, w.Y, w.App, w.Title)
			}
			return tw.Flush()
		}),
	}
	windows.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cursor := &cobra.Command{
		Use:   "cursor ID",
		Short: "Print the pointer's position: X Y",
		Args:  exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			p, err := d.Cursor(c.Context())
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%d %d\n", p.X, p.Y)
			return nil
		}),
	}
	launch := &cobra.Command{
		Use:   "launch ID APP | launch ID -- CMD [ARGS...]",
		Short: "Start a program on the display (chromium, terminal, or a command)",
		Args:  minArgs(2),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			req := api.DesktopLaunchRequest{Cmd: args}
			if c.ArgsLenAtDash() < 0 && len(args) == 1 {
				req = api.DesktopLaunchRequest{App: args[0]}
			}
			p, err := d.Launch(c.Context(), req)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), p.Pid)
			return nil
		}),
	}
	open := &cobra.Command{
		Use:   "open ID URL",
		Short: "Open URL in Chromium on the display",
		Args:  exactArgs(2),
		RunE: run(func(c *cobra.Command, d *client.Desktop, args []string) error {
			p, err := d.Open(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), p.Pid)
			return nil
		}),
	}
	var interactive bool
	urlCmd := &cobra.Command{
		Use:   "url [--interactive] ID",
		Short: "Print the live view's URL (view-only unless --interactive)",
		Long: `Print the URL of the desktop's live view: noVNC through the preview proxy,
with the sandbox's token. Whoever holds it can watch the desktop; with
--interactive, also drive it. View-only is enforced in the sandbox.`,
		Args: exactArgs(1),
		RunE: run(func(c *cobra.Command, d *client.Desktop, _ []string) error {
			u, err := d.StreamURL(c.Context(), !interactive)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), u)
			return nil
		}),
	}
	urlCmd.Flags().BoolVar(&interactive, "interactive", false, "a URL that can also send mouse and keyboard input")

	c.AddCommand(start, status, stop, screenshot, click, move, drag, scroll, typeText, key, actions,
		windows, cursor, launch, open, urlCmd)
	return c
}

// printDesktop prints a desktop's state in a line or two.
func printDesktop(w io.Writer, d *api.Desktop) error {
	if d.State != api.DesktopRunning {
		fmt.Fprintln(w, d.State)
		if d.Error != "" {
			fmt.Fprintln(w, d.Error)
		}
		return nil
	}
	_, err := fmt.Fprintf(w, "%s %s %dx%d dpi %d\n", d.State, d.Display, d.Width, d.Height, d.DPI)
	return err
}

// point parses X and Y.
func point(x, y string) (api.Point, error) {
	n, err := ints("X Y", x+","+y, 2)
	if err != nil {
		return api.Point{}, err
	}
	return api.Point{X: n[0], Y: n[1]}, nil
}

// ints parses want comma-separated integers.
func ints(what, s string, want int) ([]int, error) {
	parts := strings.Split(s, ",")
	if len(parts) != want {
		return nil, usageErrorf("%s wants %d integers, got %q", what, want, s)
	}
	out := make([]int, want)
	for i, p := range parts {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil {
			return nil, usageErrorf("%s: %q is not an integer", what, p)
		}
		out[i] = n
	}
	return out, nil
}

// parseActions reads a JSON list of actions or a DesktopActionsRequest.
func parseActions(b []byte) (api.DesktopActionsRequest, error) {
	var req api.DesktopActionsRequest
	b = bytes.TrimSpace(b)
	if len(b) > 0 && b[0] == '[' {
		err := json.Unmarshal(b, &req.Actions)
		if err != nil {
			return req, usageErrorf("the actions are not a JSON list of actions: %v", err)
		}
		return req, nil
	}
	if err := json.Unmarshal(b, &req); err != nil {
		return req, usageErrorf("the actions are neither a JSON list nor {\"actions\": [...]}: %v", err)
	}
	return req, nil
}
