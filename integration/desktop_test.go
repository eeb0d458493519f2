package integration

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/jpeg"
	"image/png"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// The desktop (docs/desktop.md) on the desktop template, end to end: a
// page served inside the sandbox, opened in Chromium through the API,
// driven by the API's actions, judged by the window's title (GET
// /desktop/windows) and by the pixels of the next screenshot. The page
// (sdk/testdata/desktop/page.html) gives each target a colour of its own,
// so the test finds it in a screenshot wherever the browser put it: the
// loop of a computer-use agent.

const desktopPagePort = 8123

// The page's targets.
var (
	pageButton = color.RGBA{255, 0, 255, 255}
	pageInput  = color.RGBA{0, 255, 255, 255}
	pagePad    = color.RGBA{255, 255, 0, 255}
	pageGreen  = color.RGBA{0, 200, 0, 255}
)

func needDesktopTemplate(t *testing.T) {
	t.Helper()
	if _, err := env.client.GetTemplate(context.Background(), "desktop"); err != nil {
		t.Fatalf("the desktop template is missing (%v): run scripts/build-template.sh desktop --no-import (scripts/test.sh does)", err)
	}
}

// desktopSandbox creates a desktop sandbox on tier and starts its display.
func desktopSandbox(t *testing.T, tier string) (string, *client.Desktop) {
	t.Helper()
	needDesktopTemplate(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "desktop", Isolation: tier, MemoryMB: 2048, TTLSeconds: 900})
	d := env.client.Desktop(id)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	st, err := d.Start(ctx, api.StartDesktopRequest{})
	if err != nil {
		t.Fatalf("desktop start: %v", err)
	}
	t.Logf("%s: desktop start took %v", tier, time.Since(t0).Round(time.Millisecond))
	if st.State != api.DesktopRunning || st.Width != 1024 || st.Height != 768 {
		t.Fatalf("desktop start: %+v", st)
	}
	return id, d
}

// servePage serves the test page on the sandbox's loopback and returns its
// URL there.
func servePage(t *testing.T, id string) string {
	t.Helper()
	page, err := os.ReadFile(filepath.Join(env.repo, "sdk/testdata/desktop/page.html"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.WriteFile(context.Background(), id, "/tmp/site/page.html", bytes.NewReader(page), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.StartProcess(context.Background(), id, api.StartProcessRequest{
		Cmd: []string{"python3", "-m", "http.server", fmt.Sprint(desktopPagePort), "--bind", "127.0.0.1", "--directory", "/tmp/site"},
		Tag: "page"}); err != nil {
		t.Fatal(err)
	}
	u := fmt.Sprintf("http://127.0.0.1:%d/page.html", desktopPagePort)
	mustSh(t, id, fmt.Sprintf(`for i in $(seq 300); do python3 -c "import urllib.request; urllib.request.urlopen('%s')" 2>/dev/null && exit 0; sleep 0.1; done; exit 1`, u))
	return u
}

// shot takes a PNG screenshot and decodes it.
func shot(t *testing.T, d *client.Desktop) image.Image {
	t.Helper()
	s, err := d.Screenshot(context.Background(), api.ScreenshotOptions{})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(s.Data))
	if err != nil {
		t.Fatalf("screenshot is not a PNG: %v", err)
	}
	return img
}

// keepShot writes a screenshot where a person can look at it: the test's
// artifacts (AGENTBOX_TEST_ARTIFACTS) and, with AGENTBOX_UPDATE_DOC_IMAGES
// set, docs/images for docs/desktop.md.
func keepShot(t *testing.T, d *client.Desktop, name string) {
	t.Helper()
	s, err := d.Screenshot(context.Background(), api.ScreenshotOptions{})
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	var dirs []string
	if dir := os.Getenv("AGENTBOX_TEST_ARTIFACTS"); dir != "" {
		dirs = append(dirs, dir)
	}
	if os.Getenv("AGENTBOX_UPDATE_DOC_IMAGES") != "" {
		dirs = append(dirs, filepath.Join(env.repo, "docs/images"))
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), s.Data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// near says c is within 12 of want in each channel (PNG is lossless, but
// Chromium's colour management may move a value by a step or two).
func near(c color.Color, want color.RGBA) bool {
	r, g, b, _ := c.RGBA()
	d := func(a uint32, w uint8) bool {
		x := int(a>>8) - int(w)
		return x > -12 && x < 12
	}
	return d(r, want.R) && d(g, want.G) && d(b, want.B)
}

// findColour returns the bounding box of the pixels of colour want.
func findColour(img image.Image, want color.RGBA) (image.Rectangle, bool) {
	b := img.Bounds()
	box := image.Rectangle{}
	found := false
	for y := b.Min.Y; y < b.Max.Y; y++ {
		for x := b.Min.X; x < b.Max.X; x++ {
			if near(img.At(x, y), want) {
				p := image.Rect(x, y, x+1, y+1)
				if !found {
					box, found = p, true
				} else {
					box = box.Union(p)
				}
			}
		}
	}
	return box, found
}

// waitFor polls cond every 100 ms until it holds or bound passes; what
// describes the last state seen for the failure message.
func waitFor(t *testing.T, bound time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(bound)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s; last seen: %s", bound, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// pageTitle returns the title of the page's window ("" if none): the
// window's title without the browser's " - Chromium".
func pageTitle(t *testing.T, d *client.Desktop) (string, []api.DesktopWindow) {
	t.Helper()
	ws, err := d.Windows(context.Background())
	if err != nil {
		t.Fatalf("windows: %v", err)
	}
	for _, w := range ws {
		if strings.Contains(strings.ToLower(w.App), "chromium") {
			return strings.TrimSuffix(w.Title, " - Chromium"), ws
		}
	}
	return "", ws
}

// titleWithin polls until the page's title is want, for at most bound.
func titleWithin(t *testing.T, d *client.Desktop, want string, bound time.Duration) bool {
	t.Helper()
	for deadline := time.Now().Add(bound); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, _ := pageTitle(t, d); got == want {
			return true
		}
	}
	return false
}

// chromiumState describes the browser process pid, its last stderr and
// the sandbox's processes, for a failure message.
func chromiumState(t *testing.T, id string, pid int) string {
	t.Helper()
	ctx := context.Background()
	var b strings.Builder
	if p, err := env.client.GetProcess(ctx, id, strconv.Itoa(pid)); err == nil {
		fmt.Fprintf(&b, "chromium (pid %d): %+v\n", pid, *p)
	}
	if out, err := env.client.ProcessOutput(ctx, id, strconv.Itoa(pid), 0, 0); err == nil {
		errs := out.Stderr
		if len(errs) > 3000 {
			errs = errs[len(errs)-3000:]
		}
		fmt.Fprintf(&b, "its stderr (end): %s\n", errs)
	}
	if ws, err := env.client.Desktop(id).Windows(ctx); err == nil {
		fmt.Fprintf(&b, "windows: %+v\n", ws)
	}
	fmt.Fprintf(&b, "ps: %s", sh(t, id, "ps -eo pid,stat,etime,wchan:16,args | cut -c1-160 | head -50").Stdout)
	return b.String()
}

// waitTitle waits for the page's title to be want.
func waitTitle(t *testing.T, d *client.Desktop, want string) {
	t.Helper()
	waitFor(t, 60*time.Second, fmt.Sprintf("the page's title is not %q", want), func() (bool, string) {
		got, ws := pageTitle(t, d)
		return got == want, fmt.Sprintf("%q (windows %+v)", got, ws)
	})
}

// waitColour waits until a screenshot shows colour c and returns its box.
func waitColour(t *testing.T, d *client.Desktop, name string, c color.RGBA) image.Rectangle {
	t.Helper()
	var box image.Rectangle
	waitFor(t, 60*time.Second, "no "+name+" in the screenshot", func() (bool, string) {
		var ok bool
		box, ok = findColour(shot(t, d), c)
		return ok && box.Dx() > 10 && box.Dy() > 10, fmt.Sprint(box)
	})
	return box
}

func center(r image.Rectangle) (int, int) { return (r.Min.X + r.Max.X) / 2, (r.Min.Y + r.Max.Y) / 2 }

func act(t *testing.T, d *client.Desktop, actions ...api.DesktopAction) *api.DesktopActionsResult {
	t.Helper()
	res, err := d.Actions(context.Background(), api.DesktopActionsRequest{Actions: actions})
	if err != nil {
		t.Fatalf("actions %+v: %v", actions, err)
	}
	return res
}

func xy(x, y int) (*int, *int) { return &x, &y }

func TestDesktopContainer(t *testing.T) { testDesktop(t, "container") }

func TestDesktopGvisor(t *testing.T) {
	needGvisor(t)
	testDesktop(t, "gvisor")
}

func testDesktop(t *testing.T, tier string) {
	ctx := context.Background()
	id, d := desktopSandbox(t, tier)

	// Starting again at the same size is a no-op.
	if st, err := d.Start(ctx, api.StartDesktopRequest{Width: 1024, Height: 768}); err != nil || st.State != api.DesktopRunning {
		t.Fatalf("second start: %+v, %v", st, err)
	}
	if st, err := d.Status(ctx); err != nil || st.State != api.DesktopRunning || st.Display == "" {
		t.Fatalf("status: %+v, %v", st, err)
	}

	// Screenshots: a PNG of the screen; a scaled JPEG of the size asked.
	s, err := d.Screenshot(ctx, api.ScreenshotOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(s.Data)); err != nil || cfg.Width != 1024 || cfg.Height != 768 {
		t.Fatalf("PNG screenshot: %+v, %v", cfg, err)
	}
	if s.ScreenWidth != 1024 || s.ScreenHeight != 768 || s.Width != 1024 || s.Height != 768 {
		t.Errorf("PNG screenshot's headers: %+v", s)
	}
	s, err = d.Screenshot(ctx, api.ScreenshotOptions{Format: api.ScreenshotJPEG, Quality: 60, Scale: "512x384"})
	if err != nil {
		t.Fatal(err)
	}
	if cfg, err := jpeg.DecodeConfig(bytes.NewReader(s.Data)); err != nil || cfg.Width != 512 || cfg.Height != 384 {
		t.Fatalf("JPEG 512x384 screenshot: %+v, %v", cfg, err)
	}
	if s.Format != api.ScreenshotJPEG || s.Width != 512 || s.ScreenWidth != 1024 {
		t.Errorf("JPEG screenshot's headers: format %s image %dx%d screen %dx%d", s.Format, s.Width, s.Height, s.ScreenWidth, s.ScreenHeight)
	}

	// What a step costs on this machine (reported, not judged: make bench
	// judges the budgets).
	var shots, clicks []time.Duration
	for i := 0; i < 15; i++ {
		t0 := time.Now()
		if _, err := d.Screenshot(ctx, api.ScreenshotOptions{}); err != nil {
			t.Fatal(err)
		}
		shots = append(shots, time.Since(t0))
		x, y := xy(1000-i, 750)
		t0 = time.Now()
		act(t, d, api.DesktopAction{Type: api.ActionClick, X: x, Y: y})
		clicks = append(clicks, time.Since(t0))
	}
	t.Logf("%s: plain desktop, through the API: screenshot PNG p50 %v, one-click batch p50 %v", tier, median(shots), median(clicks))

	// Where a screenshot's time went, through the daemon: the agent's
	// grab and encode, the daemon's wait for the agent.
	req, _ := http.NewRequest("GET", "http://daemon/v1/sandboxes/"+id+"/desktop/screenshot", nil)
	req.Header.Set("Authorization", "Bearer "+env.key)
	resp, err := unixHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	timing := resp.Header.Get("Server-Timing")
	if !regexp.MustCompile(`^wait;dur=[0-9.]+, grab;dur=[0-9.]+, encode;dur=[0-9.]+, guest;dur=[0-9.]+$`).MatchString(timing) {
		t.Errorf("screenshot's Server-Timing = %q, want wait, grab, encode and guest durations", timing)
	}
	t.Logf("%s: Server-Timing: %s", tier, timing)

	// The page, served in the sandbox, opened in Chromium.
	pageURL := servePage(t, id)
	browser, err := d.Open(ctx, pageURL)
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if !titleWithin(t, d, "before", 60*time.Second) {
		// Say what Chromium and the sandbox were doing (B-1, 2026-12-06:
		// once on gvisor no window showed in 60 s, cause not yet known).
		t.Fatalf("no Chromium window titled \"before\" in 60 s; %s", chromiumState(t, id, browser.Pid))
	}
	btn := waitColour(t, d, "button (magenta)", pageButton)

	// A click on the button: the title changes and the page turns green.
	bx, by := center(btn)
	x, y := xy(bx, by)
	res := act(t, d, api.DesktopAction{Type: api.ActionClick, X: x, Y: y})
	if res.Cursor.X != bx || res.Cursor.Y != by {
		t.Errorf("cursor after the click = %+v, want %d,%d", res.Cursor, bx, by)
	}
	waitTitle(t, d, "clicked")
	below := image.Pt(bx, btn.Max.Y+15)
	waitFor(t, 30*time.Second, "the page did not turn green under the button", func() (bool, string) {
		c := shot(t, d).At(below.X, below.Y)
		return near(c, pageGreen), fmt.Sprint(c)
	})
	keepShot(t, d, "desktop-clicked.png")
	if p, err := d.Cursor(ctx); err != nil || p.X != bx || p.Y != by {
		t.Errorf("cursor = %+v, %v; want %d,%d", p, err, bx, by)
	}

	// Typed text with characters beyond ASCII and beyond the keymap arrives
	// exactly.
	inp := waitColour(t, d, "input (cyan border)", pageInput)
	ix, iy := center(inp)
	const text = "Grüße é € 日本語 ✓ done"
	x, y = xy(ix, iy)
	act(t, d, api.DesktopAction{Type: api.ActionClick, X: x, Y: y}, api.DesktopAction{Type: api.ActionType, Text: text})
	waitTitle(t, d, "typed:"+text)
	keepShot(t, d, "desktop-typed.png")

	// A key chord: ctrl+a selects the input's text, BackSpace clears it.
	act(t, d, api.DesktopAction{Type: api.ActionKey, Keys: "ctrl+a"}, api.DesktopAction{Type: api.ActionKey, Keys: "BackSpace"})
	waitTitle(t, d, "typed:")
	act(t, d, api.DesktopAction{Type: api.ActionType, Text: "ok"})
	waitTitle(t, d, "typed:ok")

	// A drag from the pad records the distance moved.
	pad := waitColour(t, d, "pad (yellow)", pagePad)
	px, py := center(pad)
	act(t, d, api.DesktopAction{Type: api.ActionDrag, Path: []api.Point{{X: px, Y: py}, {X: px + 60, Y: py + 20}, {X: px + 100, Y: py + 50}}})
	waitTitle(t, d, "dragged:100,50")

	// Scrolling moves the page: the button leaves the screen.
	x, y = xy(600, 500)
	res = act(t, d, api.DesktopAction{Type: api.ActionScroll, X: x, Y: y, DY: 5})
	waitTitle(t, d, "scrolled:down")
	if res.Cursor.X != 600 || res.Cursor.Y != 500 {
		t.Errorf("cursor after the scroll = %+v", res.Cursor)
	}

	// A batch with a screenshot after its last action.
	res, err = d.Actions(ctx, api.DesktopActionsRequest{
		Actions:    []api.DesktopAction{{Type: api.ActionMove, X: &bx, Y: &by}, {Type: api.ActionWait, MS: 10}},
		Screenshot: &api.ScreenshotOptions{Format: api.ScreenshotPNG, Scale: "0.5"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Screenshot == nil || res.Screenshot.Width != 512 || res.Screenshot.Height != 384 {
		t.Fatalf("actions' screenshot: %+v", res.Screenshot)
	}
	if cfg, err := png.DecodeConfig(bytes.NewReader(res.Screenshot.Data)); err != nil || cfg.Width != 512 {
		t.Fatalf("actions' screenshot does not decode at 512 wide: %+v, %v", cfg, err)
	}

	// A bad action names its index.
	_, err = d.Actions(ctx, api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionWait, MS: 1}, {Type: "fly"}}})
	if err == nil || !strings.Contains(err.Error(), "1") {
		t.Errorf("an unknown action type: %v", err)
	}

	// The live view's URL: port 6080 through the preview proxy, with the
	// token, view-only unless asked.
	for _, viewOnly := range []bool{true, false} {
		u, err := d.StreamURL(ctx, viewOnly)
		if err != nil {
			t.Fatalf("stream url: %v", err)
		}
		pu, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		q := pu.Query()
		if !strings.HasPrefix(pu.Host, "6080-"+id+".") || pu.Path != "/vnc.html" || q.Get(api.PreviewTokenQuery) == "" ||
			q.Get("view_only") != fmt.Sprint(viewOnly) || q.Get("password") == "" {
			t.Errorf("stream url (view_only %v) = %s", viewOnly, u)
		}
	}

	// Stop: the display is gone, and a screenshot says so.
	if err := d.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Status(ctx); err != nil || st.State != api.DesktopStopped {
		t.Errorf("status after stop: %+v, %v", st, err)
	}
	if _, err := d.Screenshot(ctx, api.ScreenshotOptions{}); err == nil {
		t.Error("a screenshot of a stopped desktop worked")
	}
	// The stop ended x11vnc with SIGTERM before any SIGKILL, so it
	// removed its System V shared memory segments: killed, it left them
	// in the sandbox's IPC namespace (about 35 a start), until shmget
	// failed and no desktop could start again. gVisor has no
	// /proc/sysvipc to read.
	if tier == "container" {
		if left := strings.TrimSpace(mustSh(t, id, "tail -n +2 /proc/sysvipc/shm")); left != "" {
			t.Errorf("System V shared memory segments left after the desktop stopped:\n%s", left)
		}
	}
}

// TestDesktopNoHostDisplay: the daemon's DISPLAY and XAUTHORITY never
// reach a sandbox, and a host X server's sockets are not reachable from
// one (the abstract socket is per network namespace; /tmp/.X11-unix is
// the sandbox's own).
func TestDesktopNoHostDisplay(t *testing.T) {
	needBase(t)
	t.Setenv("DISPLAY", ":77")
	t.Setenv("XAUTHORITY", "/root/.Xauthority-of-the-host")
	// A host X server on :77, listening on its abstract and path sockets.
	if err := os.MkdirAll("/tmp/.X11-unix", 0o1777); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	startHostXvfb(t, ctx, "77")
	for _, tier := range []string{"container", "gvisor"} {
		t.Run(tier, func(t *testing.T) {
			if tier == "gvisor" {
				needGvisor(t)
			}
			id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier})
			out := mustSh(t, id, `env | grep -E '^(DISPLAY|XAUTHORITY)=' || true
test -e /tmp/.X11-unix/X77 && echo path-socket-visible
python3 - <<'EOF'
import socket
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    s.connect("\0/tmp/.X11-unix/X77")
    print("abstract-socket-reachable")
except OSError:
    pass
EOF`)
			if out != "" {
				t.Errorf("the host's X leaks into a %s sandbox:\n%s", tier, out)
			}
		})
	}
}

// startHostXvfb runs Xvfb on display :n of the host until the test ends
// and waits for its socket.
func startHostXvfb(t *testing.T, ctx context.Context, n string) {
	t.Helper()
	if _, err := exec.LookPath("Xvfb"); err != nil {
		t.Fatal("Xvfb is missing on the host: run scripts/install-test-deps.sh")
	}
	cmd := exec.CommandContext(ctx, "Xvfb", ":"+n, "-nolisten", "tcp", "-screen", "0", "64x64x24")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	waitFor(t, 30*time.Second, "the host's Xvfb made no socket", func() (bool, string) {
		_, err := os.Stat("/tmp/.X11-unix/X" + n)
		return err == nil, fmt.Sprint(err)
	})
}

// TestExampleComputerUse runs examples/computer_use.py: the scripted
// screenshot -> decide -> act loop fills and submits the form.
func TestExampleComputerUse(t *testing.T) {
	needDesktopTemplate(t)
	out := filepath.Join(t.TempDir(), "final.png")
	if dir := os.Getenv("AGENTBOX_TEST_ARTIFACTS"); dir != "" {
		out = filepath.Join(dir, "computer_use.png")
	}
	text, err := runExample(t, "computer_use.py", "--out", out)
	if err != nil {
		t.Fatalf("computer_use.py failed: %v (its last screenshot: %s)", err, out)
	}
	for _, want := range []string{"the name field is empty", "the email field is empty", "the button is at",
		"submitted", "window title: submitted:Ada Lovelace <ada@example.org>"} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the final screenshot is not a PNG: %v", err)
	}
	if box, ok := findColour(img, color.RGBA{0, 170, 0, 255}); !ok || box.Dx() < 200 {
		t.Errorf("the final screenshot is not green where the page is: %v", box)
	}
}

func median(ds []time.Duration) time.Duration {
	s := append([]time.Duration(nil), ds...)
	slices.Sort(s)
	return s[len(s)/2].Round(10 * time.Microsecond)
}
