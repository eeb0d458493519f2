package integration

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/chromedp/chromedp"
)

// TestConsoleDesktop: the console's desktop tab on a desktop sandbox.
// Its button starts the display, the tab shows the screen, and its live
// view links are the API's (view-only and interactive); the view-only one
// opens noVNC connected to the sandbox. The usage tab draws its charts.
func TestConsoleDesktop(t *testing.T) {
	importDesktop(t)
	ctx := context.Background()
	base := consoleTCP(t)
	_, tc, key := tenantKey(t, "console-desktop", nil)
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	sb, err := tc.CreateSandbox(cctx, api.CreateSandboxRequest{Template: "desktop"})
	if err != nil {
		t.Fatal(err)
	}
	id := sb.ID
	t.Cleanup(func() { _ = tc.DestroySandbox(context.Background(), id) })

	b := newConsoleBrowser(t)
	b.run("open the console", chromedp.Navigate(base+"/console/"))
	b.waitTrue("the sign-in form", `!!document.querySelector("form#signin input#key")`, time.Minute)
	b.run("sign in", chromedp.SetValue(chromedp.CSS("#key"), key.Secret), chromedp.Click(chromedp.CSS("form#signin button")))
	b.waitTrue("the sandboxes page", `!!document.querySelector("form#create") && location.hash === "#/sandboxes"`, time.Minute)

	b.run("open the desktop tab", chromedp.Navigate(base+"/console/#/sandbox/"+id+"/desktop"))
	b.waitTrue("the start button", `!!document.getElementById("desktop-start")`, time.Minute)
	b.run("start the display", chromedp.Click(chromedp.CSS("#desktop-start")))
	b.waitTrue("the screen", `(document.getElementById("desktop-shot") || {}).naturalWidth === 1024`, 2*time.Minute)
	if d, err := tc.Desktop(id).Status(ctx); err != nil || d.State != api.DesktopRunning {
		t.Fatalf("the API says the desktop is %+v, %v", d, err)
	}
	// A terminal on the display, then Refresh: the tab shows a new
	// screenshot.
	if _, err := tc.Desktop(id).Launch(ctx, api.DesktopLaunchRequest{App: "terminal"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, time.Minute, "the terminal's window", func() (bool, string) {
		ws, err := tc.Desktop(id).Windows(ctx)
		return err == nil && len(ws) > 0, fmt.Sprintf("%v, %v", ws, err)
	})
	b.run("refresh the screen", chromedp.Click(chromedp.CSS("#desktop-refresh")))
	b.waitTrue("a second screenshot", `document.getElementById("desktop-shot").dataset.shots === "2"`, time.Minute)
	b.screenshot("desktop")

	for _, l := range []struct {
		id       string
		viewOnly bool
	}{{"live-view", true}, {"live-view-interactive", false}} {
		href := consoleEval[string](b, `document.getElementById("`+l.id+`").href`)
		want, err := tc.Desktop(id).StreamURL(ctx, l.viewOnly)
		if err != nil {
			t.Fatal(err)
		}
		if href != want {
			t.Errorf("the console's %s link = %s, the API's %s", l.id, href, want)
		}
	}

	// The view-only link works: noVNC connects through the preview proxy
	// (the test daemon's TCP door, *.localhost being loopback).
	u, err := url.Parse(consoleEval[string](b, `document.getElementById("live-view").href`))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(u.Hostname(), fmt.Sprintf("%d-%s.", api.DesktopStreamPort, id)) || u.Query().Get("view_only") != "true" {
		t.Fatalf("the live view link %s is not the view-only preview URL of port %d", u, api.DesktopStreamPort)
	}
	u.Host = fmt.Sprintf("%d-%s.localhost:%d", api.DesktopStreamPort, id, daemonTCP(t))
	hb := newHostBrowser(t)
	if status, err := hb.open(u.String()); err != nil || status != http.StatusOK {
		t.Fatalf("opening the console's live view link: status %d, %v", status, err)
	}
	if err := hb.waitNoVNCConnected(90 * time.Second); err != nil {
		t.Fatal(err)
	}

	// The usage tab: the last sample and a chart each of CPU, memory,
	// disk and processes over the kept samples (two or more: the page
	// is reloaded until the daemon has taken a second one).
	openUsage := chromedp.Navigate(base + "/console/#/sandbox/" + id + "/usage")
	b.run("open usage", openUsage)
	deadline := time.Now().Add(time.Minute)
	for !consoleEval[bool](b, `((document.querySelector("#chart-memory") || {dataset: {}}).dataset.points || 0) > 1`) && time.Now().Before(deadline) {
		time.Sleep(2 * time.Second)
		b.run("reload usage", chromedp.Reload())
	}
	b.waitTrue("the usage charts", `document.querySelectorAll("#tab svg.chart-line").length === 4 && document.querySelector("#chart-memory").dataset.points > 1`, 2*time.Minute)
	b.screenshot("usage-charts")
}
