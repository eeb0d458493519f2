package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/console"
)

// The web console (docs/console.md) in a real browser: Debian's chromium
// (scripts/install-test-deps.sh), headless, driven through the DevTools
// protocol with chromedp, on the test daemon's API behind a loopback TCP
// port. Each page's screenshot is written to AGENTBOX_CONSOLE_SCREENSHOTS
// (docs/console/ holds the ones docs/console.md shows) or bin/console.

// consoleTCP listens on a loopback port and relays each connection to the
// test daemon's unix socket (which has no TCP door of its own), for the
// test's life. It returns the base URL.
func consoleTCP(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by the cleanup
			}
			go func() {
				defer c.Close()
				d, err := net.Dial("unix", env.cfg.Socket)
				if err != nil {
					return
				}
				defer d.Close()
				done := make(chan struct{})
				go func() { io.Copy(d, c); d.(*net.UnixConn).CloseWrite(); close(done) }()
				io.Copy(c, d)
				c.(*net.TCPConn).CloseWrite()
				<-done
			}()
		}
	}()
	return "http://" + ln.Addr().String()
}

// consoleBrowser is one headless Chromium tab, ended with the test.
type consoleBrowser struct {
	t     *testing.T
	ctx   context.Context
	shots string
}

func newConsoleBrowser(t *testing.T) *consoleBrowser {
	t.Helper()
	ctx := startChromium(t, 1280, 860)
	shots := os.Getenv("AGENTBOX_CONSOLE_SCREENSHOTS")
	if shots == "" {
		shots = filepath.Join(env.repo, "bin", "console")
	} else if !filepath.IsAbs(shots) {
		shots = filepath.Join(env.repo, shots)
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	return &consoleBrowser{t: t, ctx: ctx, shots: shots}
}

// run runs actions, each call bounded by a generous minute.
func (b *consoleBrowser) run(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 90*time.Second)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
}

// eval evaluates a JavaScript expression.
func consoleEval[T any](b *consoleBrowser, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("evaluating %s: %v", expr, err)
	}
	return v
}

// waitTrue polls a JavaScript condition until it holds, for at most bound.
func (b *consoleBrowser) waitTrue(what, expr string, bound time.Duration) {
	b.t.Helper()
	deadline := time.Now().Add(bound)
	for !consoleEval[bool](b, expr) {
		if time.Now().After(deadline) {
			errText := consoleEval[string](b, `(document.getElementById("error") || {}).textContent || ""`)
			b.screenshot("failed-" + strings.ReplaceAll(what, " ", "-"))
			b.t.Fatalf("%s: not within %v (page error: %q; url %s)", what, bound, errText, consoleEval[string](b, "location.href"))
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// screenshot saves the page as NAME.png.
func (b *consoleBrowser) screenshot(name string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 60*time.Second)
	defer cancel()
	png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	if err := os.WriteFile(filepath.Join(b.shots, name+".png"), png, 0o644); err != nil {
		b.t.Error(err)
	}
}

// typeLine types a line into the terminal as a keyboard does: for each
// character a key down that carries its text (the browser fires keydown
// and keypress, which is what xterm.js reads) and a key up, then Enter.
func typeLine(text string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		focus := chromedp.Focus(chromedp.CSS("textarea.xterm-helper-textarea"))
		if _, err := focus(ctx, t); err != nil {
			return err
		}
		press := func(key, code, text string, vk int64) error {
			down := input.DispatchKeyEventParams{Type: input.DispatchKeyEventTypeKeyDown, Key: key, Code: code, Text: text, UnmodifiedText: text, WindowsVirtualKeyCode: vk, NativeVirtualKeyCode: vk}
			if _, err := cdp.Call(ctx, t, input.DispatchKeyEvent, down); err != nil {
				return err
			}
			up := down
			up.Type, up.Text, up.UnmodifiedText = input.DispatchKeyEventTypeKeyUp, "", ""
			_, err := cdp.Call(ctx, t, input.DispatchKeyEvent, up)
			return err
		}
		for _, r := range text {
			code, vk := "", int64(0)
			switch {
			case r >= 'a' && r <= 'z':
				code, vk = "Key"+strings.ToUpper(string(r)), int64(r-'a'+'A')
			case r == ' ':
				code, vk = "Space", 32
			}
			if err := press(string(r), code, string(r), vk); err != nil {
				return err
			}
		}
		return press("Enter", "Enter", "\r", 13)
	})
}

// dropFile drags a file from the desktop onto the element sel names and
// drops it there, as a user's file manager does.
func dropFile(sel, file string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		box, err := chromedp.Evaluate[[]float64](`(r => [r.x + r.width / 2, r.y + r.height / 2])(document.querySelector(`+"`"+sel+"`"+`).getBoundingClientRect())`)(ctx, t)
		if err != nil {
			return err
		}
		data := &input.DragData{Items: []*input.DragDataItem{}, Files: []string{file}, DragOperationsMask: 1}
		for _, typ := range []input.DispatchDragEventType{input.DispatchDragEventTypeDragEnter, input.DispatchDragEventTypeDragOver, input.DispatchDragEventTypeDrop} {
			if _, err := cdp.Call(ctx, t, input.DispatchDragEvent, input.DispatchDragEventParams{Type: typ, X: box[0], Y: box[1], Data: data}); err != nil {
				return fmt.Errorf("%s: %w", typ, err)
			}
		}
		return nil
	})
}

// TestConsole: sign in with a tenant's key, create a sandbox, type `echo
// hi` in the terminal and see hi, reload and find the same terminal,
// upload a file and see it listed and in the sandbox, view it, visit
// every page, pause, resume, snapshot, fork, reset and destroy the
// sandbox from its buttons; then the admin pages with the admin key.
func TestConsole(t *testing.T) {
	base := consoleTCP(t)
	hc := &http.Client{Timeout: 30 * time.Second}

	// The shell loads without a key, with its policy; the API does not.
	resp, err := hc.Get(base + "/console/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Security-Policy") != console.CSP {
		t.Fatalf("GET /console/ = %d, CSP %q", resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
	}
	resp, err = hc.Get(base + "/console/xterm/xterm.mjs")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /console/xterm/xterm.mjs = %d: the terminal's assets are not embedded; run make build (scripts/console-assets.sh) before the tests", resp.StatusCode)
	}
	if resp, err = hc.Get(base + "/v1/sandboxes"); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("GET /v1/sandboxes without a key = %d, want 401", resp.StatusCode)
	}

	_, tc, key := tenantKey(t, "console", nil)
	b := newConsoleBrowser(t)
	b.run("open the console", chromedp.Navigate(base+"/console/"))
	b.waitTrue("the sign-in form", `!!document.querySelector("form#signin input#key")`, time.Minute)
	b.screenshot("signin")

	// A wrong key is refused and not kept.
	b.run("sign in with a wrong key", chromedp.SendKeys(chromedp.CSS("#key"), "ak_wrong"), chromedp.Click(chromedp.CSS("form#signin button")))
	b.waitTrue("the refusal", `!document.getElementById("error").hidden`, time.Minute)
	if consoleEval[bool](b, `sessionStorage.getItem("agentbox.key") !== null`) {
		t.Error("a refused key stayed in sessionStorage")
	}

	b.run("sign in", chromedp.SetValue(chromedp.CSS("#key"), key.Secret), chromedp.Click(chromedp.CSS("form#signin button")))
	b.waitTrue("the sandboxes page", `!!document.querySelector("form#create") && location.hash === "#/sandboxes"`, time.Minute)
	if got := consoleEval[string](b, `localStorage.length + ":" + document.cookie`); got != "0:" {
		t.Errorf("the console kept something beyond sessionStorage: %s", got)
	}
	// Create a busybox sandbox from the form.
	consoleEval[bool](b, `(() => { document.getElementById("create-template").value = "busybox"; return true })()`)
	b.run("create", chromedp.Click(chromedp.CSS("#create-button")))
	b.waitTrue("the new sandbox in the list", `document.querySelectorAll("tr[data-id]").length === 1`, 2*time.Minute)
	id := consoleEval[string](b, `document.querySelector("tr[data-id]").dataset.id`)
	sb, err := tc.GetSandbox(context.Background(), id)
	if err != nil || sb.Template != "busybox" || sb.State != "running" {
		t.Fatalf("the sandbox the console created: %+v, %v", sb, err)
	}
	t.Cleanup(func() { _ = tc.DestroySandbox(context.Background(), id) })
	b.screenshot("sandboxes")

	// The terminal: type echo hi, see hi on a line of its own.
	b.run("open the terminal", chromedp.Navigate(base+"/console/#/sandbox/"+id+"/terminal"))
	b.waitTrue("the terminal connected", `(document.getElementById("terminal") || {dataset: {}}).dataset.connected === "true"`, 2*time.Minute)
	b.run("type echo hi", typeLine("echo hi"))
	hiLine := `[...document.querySelectorAll(".xterm-rows > div")].some(d => d.textContent.trim() === "hi")`
	b.waitTrue("hi in the terminal", hiLine, time.Minute)
	b.screenshot("terminal")
	ptys := func() int {
		list, err := tc.ListPTYs(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, s := range list {
			if s.State != "exited" {
				n++
			}
		}
		return n
	}
	if n := ptys(); n != 1 {
		t.Fatalf("%d terminals in the sandbox after the first attach, want 1", n)
	}
	// A reload reattaches to the same PTY: its screen comes back.
	b.run("reload", chromedp.Reload())
	b.waitTrue("the terminal reattached", `(document.getElementById("terminal") || {dataset: {}}).dataset.connected === "true"`, 2*time.Minute)
	b.waitTrue("hi replayed after the reload", hiLine, time.Minute)
	if n := ptys(); n != 1 {
		t.Errorf("%d terminals in the sandbox after a reload, want the same 1", n)
	}
	// Resizing the window resizes the PTY: stty in it says the size the
	// terminal shows.
	before := consoleEval[string](b, `document.getElementById("terminal").dataset.size`)
	b.run("resize", chromedp.EmulateViewport(900, 600))
	b.waitTrue("the terminal refitted", `document.getElementById("terminal").dataset.size !== "`+before+`"`, time.Minute)
	b.run("type stty size", typeLine("stty size"))
	b.waitTrue("stty size = the terminal's size", `(() => { const [c, r] = document.getElementById("terminal").dataset.size.split("x"); return [...document.querySelectorAll(".xterm-rows > div")].some(d => d.textContent.trim() === r + " " + c) })()`, time.Minute)
	b.run("restore the size", chromedp.EmulateViewport(1280, 860))

	// Files: upload through the file input (the drop zone's handler), see it listed.
	local := filepath.Join(t.TempDir(), "hello-console.txt")
	if err := os.WriteFile(local, []byte("uploaded from the console\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	consoleEval[bool](b, `(() => { sessionStorage.setItem("agentbox.dir.`+id+`", "/tmp"); return true })()`)
	b.run("open files", chromedp.Navigate(base+"/console/#/sandbox/"+id+"/files"))
	b.waitTrue("the files page", `!!document.getElementById("upload")`, time.Minute)
	b.run("upload", chromedp.SetUploadFiles(chromedp.CSS("#upload"), []string{local}))
	b.waitTrue("the file listed", `!!document.querySelector('tr[data-name="hello-console.txt"]')`, time.Minute)
	if res, err := tc.Exec(context.Background(), id, api.ExecRequest{Shell: "cat /tmp/hello-console.txt"}); err != nil || res.Stdout != "uploaded from the console\n" {
		t.Errorf("the uploaded file in the sandbox: %+v, %v", res, err)
	}
	// And by drag and drop.
	dropped := filepath.Join(t.TempDir(), "dropped.txt")
	if err := os.WriteFile(dropped, []byte("dropped on the console\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b.run("drop a file", dropFile("#dropzone", dropped))
	b.waitTrue("the dropped file listed", `!!document.querySelector('tr[data-name="dropped.txt"]')`, time.Minute)
	if res, err := tc.Exec(context.Background(), id, api.ExecRequest{Shell: "cat /tmp/dropped.txt"}); err != nil || res.Stdout != "dropped on the console\n" {
		t.Errorf("the dropped file in the sandbox: %+v, %v", res, err)
	}
	b.run("view", chromedp.Click(chromedp.CSS(`tr[data-name="hello-console.txt"] button`)))
	b.waitTrue("the file's text", `((document.getElementById("file-text") || {}).textContent || "").includes("uploaded from the console")`, time.Minute)
	b.screenshot("files")

	// Every other page of the sandbox, and the tenant's lists, with
	// something on them: a background process and a snapshot.
	if _, err := tc.StartProcess(context.Background(), id, api.StartProcessRequest{Cmd: []string{"sh", "-c", "echo serving; sleep 600"}, Tag: "web"}); err != nil {
		t.Fatal(err)
	}
	snap, err := tc.CreateSnapshot(context.Background(), id, "console-demo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.DeleteSnapshot(context.Background(), snap.ID) })
	for _, tab := range []string{"processes", "egress", "previews", "usage"} {
		b.run("open "+tab, chromedp.Navigate(base+"/console/#/sandbox/"+id+"/"+tab))
		b.waitTrue(tab, `!!document.querySelector('.tabs a.on[data-tab="`+tab+`"]') && document.getElementById("tab").childElementCount > 0`, time.Minute)
		switch tab {
		case "processes": // its output
			b.run("logs", chromedp.Click(chromedp.CSS(`#tab tbody tr button`)))
			b.waitTrue("the process's output", `document.getElementById("proc-output").textContent.includes("serving")`, time.Minute)
		case "previews": // a link for port 8000 with the preview token
			b.run("add a port", chromedp.SetValue(chromedp.CSS(`#tab input[type="number"]`), "8000"), chromedp.Click(chromedp.CSS(`#tab form button`)))
			b.waitTrue("the preview link", `[...document.querySelectorAll("#previews a")].some(a => a.href.startsWith("http://8000-`+id+`."))`, time.Minute)
		}
		b.screenshot(tab)
	}
	for _, page := range []string{"templates", "snapshots"} {
		b.run("open "+page, chromedp.Navigate(base+"/console/#/"+page))
		b.waitTrue(page, `!!document.querySelector("main table") && document.querySelector("main h1").textContent.toLowerCase() === "`+page+`" && document.querySelectorAll("main tbody tr").length > 0`, time.Minute)
		b.screenshot(page)
	}
	if consoleEval[bool](b, `!document.getElementById("nav-admin").hidden`) {
		t.Error("a tenant's key shows the admin page")
	}

	// The lifecycle buttons of the list, each checked through the API.
	b.run("open the list", chromedp.Navigate(base+"/console/#/sandboxes"))
	b.waitTrue("the list", `!!document.querySelector('tr[data-id="`+id+`"] button[data-action="destroy"]')`, time.Minute)
	consoleEval[bool](b, `(() => { window.confirm = () => true; window.prompt = () => "from-console"; return true })()`)
	row := `tr[data-id="` + id + `"]`
	state := func(want string) {
		t.Helper()
		b.waitTrue("state "+want, `(document.querySelector('`+row+` td:nth-child(2)') || {}).textContent === "`+want+`"`, 2*time.Minute)
		if got, err := tc.GetSandbox(context.Background(), id); err != nil || got.State != want {
			t.Fatalf("the API says the sandbox is %+v, %v; the console showed %s", got, err, want)
		}
	}
	b.waitTrue("the sandbox's usage in the list", `((document.querySelector('`+row+` td.usage') || {}).textContent || "").includes("% cpu")`, 2*time.Minute)
	b.screenshot("sandboxes")
	b.run("pause", chromedp.Click(chromedp.CSS(row+` button[data-action="pause"]`)))
	state("paused")
	b.run("resume", chromedp.Click(chromedp.CSS(row+` button[data-action="resume"]`)))
	state("running")
	b.run("snapshot", chromedp.Click(chromedp.CSS(row+` button[data-action="snapshot"]`)))
	waitFor(t, 2*time.Minute, "the snapshot from the console", func() (bool, string) {
		list, err := tc.ListSnapshots(context.Background())
		for _, sn := range list {
			if sn.Name == "from-console" && sn.SandboxID == id {
				t.Cleanup(func() { _ = tc.DeleteSnapshot(context.Background(), sn.ID) })
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d snapshots (%v)", len(list), err)
	})
	b.run("fork", chromedp.Click(chromedp.CSS(row+` button[data-action="fork"]`)))
	b.waitTrue("the fork in the list", `document.querySelectorAll("tr[data-id]").length === 2`, 2*time.Minute)
	child := consoleEval[string](b, `[...document.querySelectorAll("tr[data-id]")].map(r => r.dataset.id).find(x => x !== "`+id+`")`)
	t.Cleanup(func() { _ = tc.DestroySandbox(context.Background(), child) })
	if got, err := tc.GetSandbox(context.Background(), child); err != nil || got.Parent != id {
		t.Errorf("the fork: %+v, %v; want a child of %s", got, err, id)
	}
	b.run("reset", chromedp.Click(chromedp.CSS(row+` button[data-action="reset"]`)))
	waitFor(t, 2*time.Minute, "the reset (the uploaded file gone)", func() (bool, string) {
		res, err := tc.Exec(context.Background(), id, api.ExecRequest{Shell: "test -e /tmp/hello-console.txt"})
		if err != nil {
			return false, err.Error()
		}
		return res.ExitCode == 1, fmt.Sprintf("test -e exits %d", res.ExitCode)
	})
	b.waitTrue("the list after the reset", `!!document.querySelector('`+row+` button[data-action="destroy"]')`, time.Minute)
	b.run("destroy", chromedp.Click(chromedp.CSS(`tr[data-id="`+id+`"] button[data-action="destroy"]`)))
	b.waitTrue("the sandbox gone from the list", `!!document.querySelector("form#create") && !document.querySelector('tr[data-id="`+id+`"]')`, 2*time.Minute)
	if _, err := tc.GetSandbox(context.Background(), id); err == nil {
		if got, _ := tc.GetSandbox(context.Background(), id); got != nil && got.State != "destroyed" && got.State != "destroying" {
			t.Errorf("the sandbox after destroy in the console: %s", got.State)
		}
	}

	// The admin key sees the admin page.
	b.run("sign out", chromedp.Click(chromedp.CSS("#signout")))
	b.waitTrue("signed out", `!!document.querySelector("form#signin") && sessionStorage.getItem("agentbox.key") === null`, time.Minute)
	b.run("sign in as admin", chromedp.SetValue(chromedp.CSS("#key"), env.key), chromedp.Click(chromedp.CSS("form#signin button")))
	b.waitTrue("the admin link", `!document.getElementById("nav-admin").hidden`, time.Minute)
	b.run("open admin", chromedp.Navigate(base+"/console/#/admin"))
	b.waitTrue("the admin page", `document.querySelectorAll("main table").length === 2`, time.Minute)
	if !consoleEval[bool](b, `document.querySelector("main").textContent.includes("`+key.Tenant+`")`) {
		t.Errorf("the admin page does not list tenant %s", key.Tenant)
	}
	b.screenshot("admin")
}

// TestConsoleWithoutTerminalAssets: a binary built where the build step
// did not copy xterm.js in still serves the console, whose terminal says
// how to get it. The console's files come from a handler without them,
// the API from the test daemon.
func TestConsoleWithoutTerminalAssets(t *testing.T) {
	proxy := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) { r.Out.URL.Scheme, r.Out.URL.Host = "http", "agentbox" },
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", env.cfg.Socket)
		}},
	}
	mux := http.NewServeMux()
	mux.Handle("/console/", console.NewHandler(fstest.MapFS{}))
	mux.Handle("/", proxy)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	_, tc, key := tenantKey(t, "console-bare", nil)
	sb, err := tc.CreateSandbox(context.Background(), api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = tc.DestroySandbox(context.Background(), sb.ID) })
	b := newConsoleBrowser(t)
	b.run("open the console", chromedp.Navigate(srv.URL+"/console/"))
	b.waitTrue("the sign-in form", `!!document.querySelector("form#signin input#key")`, time.Minute)
	b.run("sign in", chromedp.SetValue(chromedp.CSS("#key"), key.Secret), chromedp.Click(chromedp.CSS("form#signin button")))
	b.waitTrue("the sandboxes page", `!!document.querySelector('tr[data-id="`+sb.ID+`"]')`, time.Minute)
	b.run("open the terminal", chromedp.Navigate(srv.URL+"/console/#/sandbox/"+sb.ID+"/terminal"))
	b.waitTrue("the message", `((document.getElementById("terminal-missing") || {}).textContent || "") === "terminal assets missing: run make build"`, time.Minute)
	// The rest of the console works.
	b.run("open files", chromedp.Navigate(srv.URL+"/console/#/sandbox/"+sb.ID+"/files"))
	b.waitTrue("the files page", `!!document.getElementById("upload") && document.querySelectorAll("main tbody tr").length > 0`, time.Minute)
	if list, err := tc.ListPTYs(context.Background(), sb.ID); err != nil || len(list) != 0 {
		t.Errorf("the terminal without its assets started a PTY: %v, %v", list, err)
	}
}
