package desktop

import (
	"context"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jezek/xgb"
	"github.com/jezek/xgb/xproto"

	"github.com/agentbox/agentbox/api"
)

// testWindow is a window of a second X client that records the input it
// gets, as an application would see it.
type testWindow struct {
	x      *xconn
	win    xproto.Window
	events chan xgb.Event
}

// openTestWindow maps a window at (x, y, w, h) named title, gives it the
// input focus and waits until it is viewable; events go to its channel.
// The window is override-redirect: openbox takes about 20 s to manage a
// window of a bare client like this one (it does not wait for xev or
// Chromium), and the test needs none of its management.
func openTestWindow(t *testing.T, m *Manager, title string, wx, wy, w, h int) *testWindow {
	t.Helper()
	m.mu.Lock()
	cookie := m.cookie
	m.mu.Unlock()
	x, err := dialX(m.opt.Display, cookie)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(x.close)
	win, err := xproto.NewWindowId(x.c)
	if err != nil {
		t.Fatal(err)
	}
	mask := uint32(xproto.EventMaskKeyPress | xproto.EventMaskKeyRelease | xproto.EventMaskButtonPress | xproto.EventMaskButtonRelease | xproto.EventMaskPointerMotion | xproto.EventMaskExposure)
	err = xproto.CreateWindowChecked(x.c, x.depth, win, x.root, int16(wx), int16(wy), uint16(w), uint16(h), 0,
		xproto.WindowClassInputOutput, xproto.WindowNone, xproto.CwBackPixel|xproto.CwOverrideRedirect|xproto.CwEventMask, []uint32{0x00ff00, 1, mask}).Check()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []struct {
		name, typ string
		val       []byte
	}{{"_NET_WM_NAME", "UTF8_STRING", []byte(title)}, {"WM_NAME", "STRING", []byte(title)}, {"WM_CLASS", "STRING", []byte("probe\x00AgentboxProbe\x00")}} {
		a, _ := x.atom(p.name)
		ty, _ := x.atom(p.typ)
		xproto.ChangeProperty(x.c, xproto.PropModeReplace, win, a, ty, 8, uint32(len(p.val)), p.val)
	}
	if err := xproto.MapWindowChecked(x.c, win).Check(); err != nil {
		t.Fatal(err)
	}
	tw := &testWindow{x: x, win: win, events: make(chan xgb.Event, 4096)}
	go func() {
		for {
			ev, err := x.c.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if ev != nil {
				tw.events <- ev
			}
		}
	}()
	deadline := time.Now().Add(30 * time.Second)
	for {
		a, err := xproto.GetWindowAttributes(x.c, win).Reply()
		if err != nil {
			t.Fatal(err)
		}
		if a.MapState == xproto.MapStateViewable {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the test window is not viewable within 30 s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := xproto.SetInputFocusChecked(x.c, xproto.InputFocusPointerRoot, win, xproto.TimeCurrentTime).Check(); err != nil {
		t.Fatal(err)
	}
	return tw
}

// next waits for the next event that keep accepts.
func (tw *testWindow) next(t *testing.T, what string, keep func(xgb.Event) bool) xgb.Event {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev := <-tw.events:
			if keep(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s within 20 s", what)
			return nil
		}
	}
}

// keysymOf reads a key event back the way a client does: the keysym at
// the event's keycode, level 1 with Shift held.
func (tw *testWindow) keysymOf(t *testing.T, code xproto.Keycode, state uint16) uint32 {
	setup := xproto.Setup(tw.x.c)
	rep, err := xproto.GetKeyboardMapping(tw.x.c, code, 1).Reply()
	if err != nil {
		t.Fatal(err)
	}
	_ = setup
	syms := rep.Keysyms
	lvl := 0
	if state&xproto.ModMaskShift != 0 && len(syms) > 1 && syms[1] != 0 {
		lvl = 1
	}
	s := uint32(syms[lvl])
	if state&xproto.ModMaskShift != 0 && (len(syms) < 2 || syms[1] == 0) && s >= 'a' && s <= 'z' {
		s -= 32
	}
	return s
}

func act(t *testing.T, m *Manager, acts ...api.DesktopAction) api.DesktopActionsResult {
	t.Helper()
	res, err := m.Actions(context.Background(), api.DesktopActionsRequest{Actions: acts})
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func TestInputReachesAWindow(t *testing.T) {
	m := startDesktop(t, 800, 600)
	tw := openTestWindow(t, m, "probe ✓ Grüße", 100, 100, 400, 300)
	cx, cy := 300, 250

	t.Run("click", func(t *testing.T) {
		act(t, m, api.DesktopAction{Type: api.ActionClick, X: &cx, Y: &cy, Button: "right"})
		ev := tw.next(t, "button press", func(e xgb.Event) bool { _, ok := e.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
		if ev.Detail != 3 || int(ev.RootX) != cx || int(ev.RootY) != cy {
			t.Errorf("press: button %d at %d,%d, want 3 at %d,%d", ev.Detail, ev.RootX, ev.RootY, cx, cy)
		}
		tw.next(t, "button release", func(e xgb.Event) bool { r, ok := e.(xproto.ButtonReleaseEvent); return ok && r.Detail == 3 })
	})
	t.Run("double click", func(t *testing.T) {
		act(t, m, api.DesktopAction{Type: api.ActionClick, X: &cx, Y: &cy, Double: true})
		for range 2 {
			tw.next(t, "button 1 press", func(e xgb.Event) bool { p, ok := e.(xproto.ButtonPressEvent); return ok && p.Detail == 1 })
		}
	})
	t.Run("scroll", func(t *testing.T) {
		act(t, m, api.DesktopAction{Type: api.ActionScroll, X: &cx, Y: &cy, DY: 2, DX: -1})
		var got []byte
		for range 3 {
			ev := tw.next(t, "scroll press", func(e xgb.Event) bool { _, ok := e.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
			got = append(got, byte(ev.Detail))
		}
		if !slices.Equal(got, []byte{5, 5, 6}) {
			t.Errorf("scroll buttons %v, want [5 5 6]", got)
		}
	})
	t.Run("drag", func(t *testing.T) {
		path := []api.Point{{X: cx - 50, Y: cy}, {X: cx + 50, Y: cy + 20}}
		act(t, m, api.DesktopAction{Type: api.ActionDrag, Path: path})
		p := tw.next(t, "press", func(e xgb.Event) bool { _, ok := e.(xproto.ButtonPressEvent); return ok }).(xproto.ButtonPressEvent)
		mv := tw.next(t, "motion with button 1", func(e xgb.Event) bool {
			mv, ok := e.(xproto.MotionNotifyEvent)
			return ok && mv.State&xproto.ButtonMask1 != 0 && int(mv.RootX) == cx+50
		}).(xproto.MotionNotifyEvent)
		r := tw.next(t, "release", func(e xgb.Event) bool { _, ok := e.(xproto.ButtonReleaseEvent); return ok }).(xproto.ButtonReleaseEvent)
		if int(p.RootX) != cx-50 || int(mv.RootY) != cy+20 || int(r.RootX) != cx+50 {
			t.Errorf("drag: press at %d, motion to %d,%d, release at %d", p.RootX, mv.RootX, mv.RootY, r.RootX)
		}
	})
	t.Run("mouse down and up", func(t *testing.T) {
		act(t, m, api.DesktopAction{Type: api.ActionMouseDown, X: &cx, Y: &cy, Button: "middle"}, api.DesktopAction{Type: api.ActionMouseUp, Button: "middle"})
		tw.next(t, "press 2", func(e xgb.Event) bool { p, ok := e.(xproto.ButtonPressEvent); return ok && p.Detail == 2 })
		tw.next(t, "release 2", func(e xgb.Event) bool { p, ok := e.(xproto.ButtonReleaseEvent); return ok && p.Detail == 2 })
	})
	t.Run("type unicode", func(t *testing.T) {
		text := "aZ9!Grüße é € 日本語 ✓ done\n"
		act(t, m, api.DesktopAction{Type: api.ActionType, Text: text})
		var got []uint32
		for range []rune(text) {
			ev := tw.next(t, "key press", func(e xgb.Event) bool {
				k, ok := e.(xproto.KeyPressEvent)
				return ok && k.Detail != xproto.Keycode(m.x.keys.shift)
			}).(xproto.KeyPressEvent)
			got = append(got, tw.keysymOf(t, ev.Detail, ev.State))
		}
		var want []uint32
		for _, r := range text {
			want = append(want, runeKeysym(r))
		}
		if !slices.Equal(got, want) {
			t.Errorf("typed keysyms\n%x\nwant\n%x", got, want)
		}
	})
	t.Run("key chord", func(t *testing.T) {
		act(t, m, api.DesktopAction{Type: api.ActionKey, Keys: "ctrl+shift+t"})
		var got []uint32
		var last xproto.KeyPressEvent
		for range 3 {
			last = tw.next(t, "key press", func(e xgb.Event) bool { _, ok := e.(xproto.KeyPressEvent); return ok }).(xproto.KeyPressEvent)
			got = append(got, tw.keysymOf(t, last.Detail, 0))
		}
		if !slices.Equal(got, []uint32{0xffe3, 0xffe1, 't'}) || last.State&(xproto.ModMaskControl|xproto.ModMaskShift) != xproto.ModMaskControl|xproto.ModMaskShift {
			t.Errorf("chord keysyms %x, state %#x", got, last.State)
		}
	})
	t.Run("cursor", func(t *testing.T) {
		x, y := 7, 9
		act(t, m, api.DesktopAction{Type: api.ActionMove, X: &x, Y: &y})
		if p, err := m.Cursor(); err != nil || p != (api.Point{X: 7, Y: 9}) {
			t.Errorf("cursor %+v %v", p, err)
		}
	})
}

// TestWindows lists a program's window (xev, from x11-utils) through the
// window manager's EWMH list: title, class, geometry, focus.
func TestWindows(t *testing.T) {
	m := startDesktop(t, 800, 600)
	p, err := m.Launch(api.DesktopLaunchRequest{Cmd: []string{"xev", "-name", "xev ✓ window", "-geometry", "300x200+40+50"}})
	if err != nil || p.Pid == 0 || p.Tag != "desktop-app-1" {
		t.Fatalf("launch: %+v, %v", p, err)
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		l, err := m.Windows()
		if err != nil {
			t.Fatal(err)
		}
		if len(l.Windows) == 1 && l.Windows[0].Focused {
			w := l.Windows[0]
			// xev sets no WM_CLASS: App stays empty.
			if w.Title != "xev ✓ window" || w.Width != 300 || w.Height != 200 || w.ID == 0 {
				t.Errorf("window %+v", w)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("xev's window is not listed and focused within 90 s: %+v", l)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Stop ends the launched program too.
	m.Stop()
	if err := syscall.Kill(p.Pid, 0); err == nil {
		deadline := time.Now().Add(10 * time.Second)
		for syscall.Kill(p.Pid, 0) == nil && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if syscall.Kill(p.Pid, 0) == nil {
			t.Errorf("xev (pid %d) still runs after Stop", p.Pid)
		}
	}
}

func TestParseKeys(t *testing.T) {
	tests := []struct {
		in   string
		want []uint32
		bad  bool
	}{
		{"ctrl+l", []uint32{0xffe3, 'l'}, false},
		{"Return", []uint32{0xff0d}, false},
		{"ctrl+shift+T", []uint32{0xffe3, 0xffe1, 'T'}, false},
		{"Page_Down", []uint32{0xff56}, false},
		{"ctrl++", []uint32{0xffe3, '+'}, false},
		{"+", []uint32{'+'}, false},
		{"F12", []uint32{0xffc9}, false},
		{"alt+é", []uint32{0xffe9, 0xe9}, false},
		{"super+€", []uint32{0xffeb, 0x010020ac}, false},
		{"", nil, true},
		{"ctrl+", nil, true},
		{"ctrl+nosuchkey", nil, true},
	}
	for _, tt := range tests {
		got, err := parseKeys(tt.in)
		if (err != nil) != tt.bad || !slices.Equal(got, tt.want) {
			t.Errorf("parseKeys(%q) = %x, %v; want %x (error: %v)", tt.in, got, err, tt.want, tt.bad)
		}
	}
}

func TestActionValidation(t *testing.T) {
	m := startDesktop(t, 320, 240)
	one, big := 1, 5000
	for _, a := range []api.DesktopAction{
		{Type: "teleport"},
		{Type: api.ActionMove},
		{Type: api.ActionMove, X: &big, Y: &one},
		{Type: api.ActionClick, X: &one},
		{Type: api.ActionClick, Button: "fourth"},
		{Type: api.ActionDrag, Path: []api.Point{{X: 1, Y: 1}}},
		{Type: api.ActionScroll},
		{Type: api.ActionKey, Keys: "hyper+q"},
		{Type: api.ActionWait, MS: 60001},
	} {
		_, err := m.Actions(context.Background(), api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionWait}, a}})
		if err == nil {
			t.Errorf("%+v: no error", a)
		}
	}
}

// TestClickThenTypeAfterAGrab types right after a click on a window whose
// clicks another client takes first, as openbox does to focus on click: a
// synchronous passive grab freezes the pointer at the press until that
// client replays it, here 300 ms later. The keys must reach the window
// after the click, not while the click waits.
func TestClickThenTypeAfterAGrab(t *testing.T) {
	m := startDesktop(t, 800, 600)
	tw := openTestWindow(t, m, "probe", 100, 100, 400, 300)

	m.mu.Lock()
	cookie := m.cookie
	m.mu.Unlock()
	wm, err := dialX(m.opt.Display, cookie)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(wm.close)
	err = xproto.GrabButtonChecked(wm.c, false, tw.win, xproto.EventMaskButtonPress, xproto.GrabModeSync, xproto.GrabModeAsync,
		xproto.WindowNone, xproto.CursorNone, 1, xproto.ModMaskAny).Check()
	if err != nil {
		t.Fatal(err)
	}
	replayed := make(chan time.Duration, 1)
	go func() {
		for {
			ev, err := wm.c.WaitForEvent()
			if ev == nil && err == nil {
				return
			}
			if p, ok := ev.(xproto.ButtonPressEvent); ok {
				t0 := time.Now()
				time.Sleep(300 * time.Millisecond)
				xproto.AllowEvents(wm.c, xproto.AllowReplayPointer, p.Time)
				xproto.GetInputFocus(wm.c).Reply()
				replayed <- time.Since(t0)
			}
		}
	}()

	cx, cy := 300, 250
	act(t, m, api.DesktopAction{Type: api.ActionClick, X: &cx, Y: &cy}, api.DesktopAction{Type: api.ActionType, Text: "ok"})
	select {
	case <-replayed:
	case <-time.After(20 * time.Second):
		t.Fatal("the grabbing client saw no press")
	}
	var got []string
	for len(got) < 4 {
		switch e := tw.next(t, "button or key event", func(e xgb.Event) bool {
			switch e.(type) {
			case xproto.ButtonPressEvent, xproto.ButtonReleaseEvent, xproto.KeyPressEvent:
				return true
			}
			return false
		}).(type) {
		case xproto.ButtonPressEvent:
			got = append(got, "press")
		case xproto.ButtonReleaseEvent:
			got = append(got, "release")
		case xproto.KeyPressEvent:
			got = append(got, fmt.Sprintf("key %c", tw.keysymOf(t, e.Detail, e.State)))
		}
	}
	if want := []string{"press", "release", "key o", "key k"}; !slices.Equal(got, want) {
		t.Errorf("the window got %q, want %q", got, want)
	}
}
