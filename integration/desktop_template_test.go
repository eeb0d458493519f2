package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// The desktop template itself (scripts/build-template.sh desktop), driven
// by exec and background processes only, on the container and gvisor
// tiers: Xvfb starts with a cookie that is enforced, MIT-SHM works (the
// X server attaches a SysV segment the client made, the guest agent's
// fast screenshot path), openbox manages windows, Chromium with the
// template's flags renders a page on the display, scrot writes a PNG and
// x11vnc answers RFB on the sandbox's loopback only.
func TestDesktopTemplate(t *testing.T) {
	for _, iso := range []string{"container", "gvisor"} {
		t.Run(iso, func(t *testing.T) {
			if iso == "gvisor" {
				needGvisor(t)
			}
			importDesktop(t)
			testDesktopTemplate(t, iso)
		})
	}
}

// desktopPage is the page Chromium shows: one colour everywhere, so that
// any pixel below the window's title bar has it.
const (
	desktopPageTitle = "agentbox-desktop-ok"
	desktopPage      = `<!doctype html><html><head><title>` + desktopPageTitle +
		`</title></head><body style="margin:0;background:rgb(20,160,90)"></body></html>`
)

var desktopPageRGB = [3]int{20, 160, 90}

func testDesktopTemplate(t *testing.T, iso string) {
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "desktop", Isolation: iso, MemoryMB: 2048})
	probe, err := os.ReadFile(filepath.Join("testdata", "desktop", "shmgrab.py"))
	if err != nil {
		t.Fatal(err)
	}
	for path, body := range map[string]string{"/tmp/dt/shmgrab.py": string(probe), "/tmp/dt/page.html": desktopPage} {
		if _, err := env.client.WriteFile(ctx, id, path, strings.NewReader(body), 0o644); err != nil {
			t.Fatalf("write %s: %v", path, err)
		}
	}
	// The template's environment and Chromium's flags file.
	if out := mustSh(t, id, `echo "$LANG"; cat /etc/chromium.d/agentbox; test -f /usr/share/novnc/vnc.html && echo novnc`); !strings.Contains(out, "C.UTF-8") ||
		!strings.Contains(out, "--no-sandbox") || !strings.HasSuffix(out, "novnc") {
		t.Errorf("LANG, chromium flags, noVNC: %q", out)
	}

	// Nothing of the host's X: no display in the environment, no socket
	// directory, and no abstract socket of a display (the host's or
	// another sandbox's) in this network namespace.
	if out := mustSh(t, id, `echo "display=$DISPLAY xauthority=$XAUTHORITY"; ls -A /tmp/.X11-unix 2>&1 | head -3; grep -c '@/tmp/.X11-unix' /proc/net/unix || true`); out != "display= xauthority=\nls: cannot access '/tmp/.X11-unix': No such file or directory\n0" {
		t.Errorf("a fresh sandbox sees X: %q", out)
	}

	// Chromium's own sandbox cannot start in ours (docs/SECURITY.md): run
	// without the template's flags it refuses to, and with them it renders.
	// (As user: as root Chromium refuses before it tries its sandbox.)
	res := execReq(t, id, api.ExecRequest{User: "user", Shell: `/usr/lib/chromium/chromium --headless=new --disable-gpu --user-data-dir=/tmp/nosb --dump-dom 'data:text/html,<title>x</title>'`})
	if res.ExitCode == 0 || !strings.Contains(res.Stderr, "No usable sandbox") {
		t.Errorf("Chromium without --no-sandbox: exit %d, stderr %q; want it to refuse (No usable sandbox)", res.ExitCode, tail(res.Stderr, 2000))
	}
	if out := mustSh(t, id, `chromium --headless=new --user-data-dir=/tmp/dt/sb --dump-dom 'data:text/html,<title>rendered</title>' 2>/dev/null`); !strings.Contains(out, "<title>rendered</title>") {
		t.Errorf("Chromium with the template's flags: %q", out)
	}

	// Xvfb with a cookie: only holders of it connect.
	mustSh(t, id, `xauth -f /tmp/dt/xauth add :7 . "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"`)
	xenv := map[string]string{"DISPLAY": ":7", "XAUTHORITY": "/tmp/dt/xauth"}
	const xsh = "export DISPLAY=:7 XAUTHORITY=/tmp/dt/xauth; "
	// -noreset: this test's clients come and go one at a time, and an X
	// server resets when its last client leaves; a client that connects
	// during the reset fails (openbox did, once in run E: "Failed to open
	// the display"). The agent's own desktop keeps a connection open.
	startBackground(t, id, api.StartProcessRequest{Tag: "t-x", Cmd: []string{"Xvfb", ":7", "-screen", "0", "1024x768x24", "-nolisten", "tcp", "-noreset", "-auth", "/tmp/dt/xauth"}})
	waitSh(t, id, "t-x", "Xvfb answers", 90*time.Second, xsh+"xdpyinfo >/dev/null 2>&1")
	if out := mustSh(t, id, xsh+"xdpyinfo"); !strings.Contains(out, "1024x768 pixels") || !strings.Contains(out, "MIT-SHM") {
		t.Errorf("xdpyinfo lacks the 1024x768 screen or MIT-SHM:\n%s", out)
	}
	if res := sh(t, id, "DISPLAY=:7 XAUTHORITY=/nonexistent xdpyinfo"); res.ExitCode == 0 {
		t.Errorf("xdpyinfo without the cookie connected: %+v", res)
	}

	// openbox takes the screen (EWMH's supporting-WM window appears).
	startBackground(t, id, api.StartProcessRequest{Tag: "t-wm", Cmd: []string{"openbox"}, Env: xenv})
	waitSh(t, id, "t-wm", "openbox manages the screen", 60*time.Second, xsh+"xprop -root _NET_SUPPORTING_WM_CHECK | grep -q 'window id'")

	// Chromium shows the page: its window's title, then its pixels read
	// back with MIT-SHM and with the core protocol.
	startBackground(t, id, api.StartProcessRequest{Tag: "t-chromium", Env: xenv, Cmd: []string{"chromium",
		"--app=file:///tmp/dt/page.html", "--window-position=0,0", "--window-size=1024,768", "--user-data-dir=/tmp/dt/chromium"}})
	start := time.Now()
	waitSh(t, id, "t-chromium", "Chromium's window titled "+desktopPageTitle, 3*time.Minute,
		xsh+"xwininfo -root -tree | grep -q "+desktopPageTitle)
	t.Logf("%s: Chromium's window titled after %v", iso, time.Since(start).Round(time.Millisecond))
	var last string
	deadline := time.Now().Add(time.Minute)
	for {
		res := sh(t, id, xsh+"python3 /tmp/dt/shmgrab.py 512 500")
		last = res.Stdout + res.Stderr
		if res.ExitCode != 0 {
			t.Fatalf("the MIT-SHM probe failed (exit %d): %s", res.ExitCode, last)
		}
		shm, core := grabbedRGB(last, "shm"), grabbedRGB(last, "core")
		if closeRGB(shm, desktopPageRGB) {
			if shm != core {
				t.Errorf("MIT-SHM read %v, the core GetImage %v at the same point", shm, core)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pixel at 512,500 never became the page's %v; last probe: %s", desktopPageRGB, last)
		}
		time.Sleep(250 * time.Millisecond)
	}

	// scrot, for agents that script it, writes a PNG of the whole screen.
	out := mustSh(t, id, xsh+`cd /tmp/dt && scrot -o s.png && python3 -c '
import struct; b = open("s.png", "rb").read(24); print(b[1:4].decode(), *struct.unpack(">II", b[16:24]))'`)
	if out != "PNG 1024 768" {
		t.Errorf("scrot's file: %q, want a 1024x768 PNG", out)
	}

	// x11vnc speaks RFB on the sandbox's loopback and on no other address.
	startBackground(t, id, api.StartProcessRequest{Tag: "t-vnc", Env: xenv, Cmd: []string{"x11vnc", "-display", ":7",
		"-localhost", "-rfbport", "5907", "-forever", "-shared", "-nopw"}})
	waitSh(t, id, "t-vnc", "x11vnc answers RFB on 127.0.0.1:5907", 90*time.Second,
		`bash -c 'exec 3<>/dev/tcp/127.0.0.1/5907 && head -c 12 <&3' | grep -q '^RFB 003.008'`)
	// Every listening socket (state 0A in /proc/net/tcp{,6}) is on
	// 127.0.0.1 or ::1: x11vnc's IPv4 port and the IPv6 one libvncserver
	// opens besides (5900 unless -rfbportv6 says otherwise).
	out = mustSh(t, id, `cat /proc/net/tcp /proc/net/tcp6 2>/dev/null | awk '$4 == "0A" { print $2 }' | sort`)
	if !strings.Contains(out, "0100007F:1713") {
		t.Errorf("x11vnc does not listen on 127.0.0.1:5907 (0100007F:1713); listeners: %q", out)
	}
	for _, l := range strings.Fields(out) {
		if !strings.HasPrefix(l, "0100007F:") && !strings.HasPrefix(l, "00000000000000000000000001000000:") {
			t.Errorf("a socket listens on %s, not on loopback (all listeners: %q)", l, out)
		}
	}
}

// startBackground starts a background process in sandbox id.
func startBackground(t *testing.T, id string, req api.StartProcessRequest) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := env.client.StartProcess(ctx, id, req); err != nil {
		t.Fatalf("start %s: %v", req.Tag, err)
	}
}

// waitSh runs script in sandbox id until it exits 0, for at most bound;
// on failure it reports the output of the background process tag, which
// is what the script waits for.
func waitSh(t *testing.T, id, tag, what string, bound time.Duration, script string) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		res := sh(t, id, script)
		if res.ExitCode == 0 {
			return
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("not within %v: %s (last try: exit %d, %s%s)", bound, what, res.ExitCode, res.Stdout, res.Stderr)
			if p, err := env.client.GetProcess(context.Background(), id, tag); err == nil {
				msg += fmt.Sprintf("\n%s is %s", tag, p.State)
			}
			if o, err := env.client.ProcessOutput(context.Background(), id, tag, 0, 0); err == nil {
				msg += fmt.Sprintf("\n%s's stdout: %s\n%s's stderr: %s", tag, tail(string(o.Stdout), 3000), tag, tail(string(o.Stderr), 3000))
			}
			t.Fatal(msg)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// grabbedRGB parses the "NAME R G B" line of shmgrab.py's output.
func grabbedRGB(out, name string) [3]int {
	var rgb [3]int
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 4 && f[0] == name {
			for i := range 3 {
				rgb[i], _ = strconv.Atoi(f[i+1])
			}
			return rgb
		}
	}
	return [3]int{-1, -1, -1}
}

// closeRGB says whether a and b differ by at most 3 in each channel
// (Chromium's software rasterizer may round a colour by a step).
func closeRGB(a, b [3]int) bool {
	for i := range 3 {
		if d := a[i] - b[i]; d < -3 || d > 3 {
			return false
		}
	}
	return true
}

var desktopImport struct {
	once sync.Once
	err  error
}

// importDesktop imports the desktop template from the build cache of
// scripts/build-template.sh (scripts/test.sh builds it with --no-import)
// the first time a test needs it.
func importDesktop(t testing.TB) {
	t.Helper()
	desktopImport.once.Do(func() {
		if _, err := env.client.GetTemplate(context.Background(), "desktop"); err == nil {
			return // imported at start (main_test.go)
		}
		dir := filepath.Join("/var/lib/agentbox/build", "desktop")
		if _, err := os.Stat(filepath.Join(dir, "usr/bin/Xvfb")); err != nil {
			desktopImport.err = fmt.Errorf("the desktop template is missing from the build cache (%v): run scripts/build-template.sh desktop --no-import (scripts/test.sh does)", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		_, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "desktop", Rootfs: dir, User: "root", Workdir: "/root",
			Env: builtinTemplateEnv()})
		if err != nil {
			desktopImport.err = fmt.Errorf("importing desktop from %s: %w", dir, err)
			return
		}
		t.Logf("imported the desktop template from %s in %v", dir, time.Since(start).Round(time.Millisecond))
	})
	if desktopImport.err != nil {
		t.Fatal(desktopImport.err)
	}
}
