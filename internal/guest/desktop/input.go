package desktop

import (
	"context"
	"fmt"
	"time"

	"github.com/jezek/xgb/xproto"
	"github.com/jezek/xgb/xtest"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// X event types that XTEST fakes.
const (
	evKeyPress      = 2
	evKeyRelease    = 3
	evButtonPress   = 4
	evButtonRelease = 5
	evMotion        = 6
)

// recycleSettle is how long a spare keycode rests after its last key
// before it is bound to another keysym.
//
// A key needs no wait after a binding to a keycode that had none: the
// server sends each client the MappingNotify before any key sent after
// the change, and a client that fetches the map when it handles the
// notify, or later, gets a map that holds every binding its keys need
// (the bindings only add keysyms). Rebinding a keycode whose key was
// sent before is the case that order does not cover: a client that
// fetches the map only after the rebinding reads the new keysym for the
// old key, and nothing a client does is visible to the agent when it
// has translated a key. The rest is a guess at that, the one timing
// guess left in typing; only a text with more distinct characters off
// the map than there are spare keycodes (18 in Xvfb's map) reaches it.
const recycleSettle = 25 * time.Millisecond

// keymap is the server's keyboard mapping as the agent knows it, and the
// spare keycodes it binds to characters the mapping lacks.
type keymap struct {
	min, max xproto.Keycode
	per      int
	// sym: keysym -> where it is (the lowest keycode; level 0 before 1).
	sym map[uint32]keyPos
	// spare keycodes (no keysym at all), what the agent bound on each
	// (0: nothing) and when it last sent its key, and the slot the next
	// binding takes.
	spare []xproto.Keycode
	slot  map[xproto.Keycode]int // spare keycode -> its index
	bound []uint32
	used  []time.Time
	next  int
	shift xproto.Keycode
}

type keyPos struct {
	code  xproto.Keycode
	shift bool
}

func (x *xconn) loadKeymap() (*keymap, error) {
	setup := xproto.Setup(x.c)
	k := &keymap{min: setup.MinKeycode, max: setup.MaxKeycode, sym: map[uint32]keyPos{}}
	count := int(k.max) - int(k.min) + 1
	rep, err := xproto.GetKeyboardMapping(x.c, k.min, byte(count)).Reply()
	if err != nil {
		return nil, fmt.Errorf("GetKeyboardMapping: %w", err)
	}
	k.per = int(rep.KeysymsPerKeycode)
	for i := 0; i < count; i++ {
		code := xproto.Keycode(int(k.min) + i)
		syms := rep.Keysyms[i*k.per : (i+1)*k.per]
		empty := true
		for _, s := range syms {
			if s != 0 {
				empty = false
			}
		}
		if empty {
			// Keycode 8 is skipped: some clients treat it specially.
			if code > 8 {
				k.spare = append(k.spare, code)
			}
			continue
		}
		for lvl := 0; lvl < 2 && lvl < k.per; lvl++ {
			s := uint32(syms[lvl])
			if s == 0 {
				continue
			}
			if _, ok := k.sym[s]; !ok {
				k.sym[s] = keyPos{code, lvl == 1}
			}
		}
		// A key with one keysym, a letter: X's rules give level 1 the
		// upper case.
		if k.per < 2 || syms[1] == 0 {
			if s := uint32(syms[0]); s >= 'a' && s <= 'z' {
				if _, ok := k.sym[s-32]; !ok {
					k.sym[s-32] = keyPos{code, true}
				}
			}
		}
	}
	if p, ok := k.sym[0xffe1]; ok {
		k.shift = p.code
	}
	if len(k.spare) == 0 {
		// No empty keycode: borrow the highest ones.
		for c := int(k.max); c > int(k.max)-8 && c > int(k.min); c-- {
			k.spare = append(k.spare, xproto.Keycode(c))
		}
	}
	k.slot = make(map[xproto.Keycode]int, len(k.spare))
	for i, c := range k.spare {
		k.slot[c] = i
	}
	return k, nil
}

// bindSpare binds keysyms (none of them on the map, at most one per
// spare keycode) to spare keycodes in turn, a new binding replacing the
// oldest. Bindings stay: typing the same characters again costs nothing.
// The keys may follow at once (see recycleSettle).
func (x *xconn) bindSpare(syms []uint32) error {
	k := x.keys
	if k.bound == nil {
		k.bound = make([]uint32, len(k.spare))
		k.used = make([]time.Time, len(k.spare))
	}
	for _, s := range syms {
		i := k.next % len(k.spare)
		k.next++
		if old := k.bound[i]; old != 0 {
			delete(k.sym, old)
			if d := time.Until(k.used[i].Add(recycleSettle)); d > 0 {
				time.Sleep(d)
			}
		}
		k.bound[i] = s
		code := k.spare[i]
		k.sym[s] = keyPos{code, false}
		ks := []xproto.Keysym{xproto.Keysym(s), xproto.Keysym(s)}
		if err := xproto.ChangeKeyboardMappingChecked(x.c, 1, code, 2, ks).Check(); err != nil {
			return fmt.Errorf("binding keysym %#x to keycode %d: %w", s, code, err)
		}
	}
	return nil
}

// sent notes that the key at code was just sent, for bindSpare.
func (x *xconn) sent(code xproto.Keycode) {
	k := x.keys
	if i, ok := k.slot[code]; ok && k.used != nil {
		k.used[i] = time.Now()
	}
}

// ensureSyms binds the keysyms that are not on the map (as many as there
// are spare keycodes; typeSyms binds the rest as it reaches them).
func (x *xconn) ensureSyms(syms []uint32) error {
	var missing []uint32
	seen := map[uint32]bool{}
	for _, s := range syms {
		if _, ok := x.keys.sym[s]; !ok && !seen[s] {
			seen[s] = true
			missing = append(missing, s)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return x.bindSpare(missing[:min(len(missing), len(x.keys.spare))])
}

func (x *xconn) fake(typ, detail byte, px, py int) {
	xtest.FakeInput(x.c, typ, detail, 0, x.root, int16(px), int16(py), 0)
}

func (x *xconn) key(code xproto.Keycode, down bool) {
	t := byte(evKeyRelease)
	if down {
		t = evKeyPress
	}
	x.fake(t, byte(code), 0, 0)
}

// typeSyms presses and releases each keysym in turn (with Shift for a
// level-1 one).
func (x *xconn) typeSyms(syms []uint32) error {
	if err := x.ensureSyms(syms); err != nil {
		return err
	}
	for _, s := range syms {
		p, ok := x.keys.sym[s]
		if !ok {
			if err := x.bindSpare([]uint32{s}); err != nil {
				return err
			}
			p = x.keys.sym[s]
		}
		if p.shift && x.keys.shift != 0 {
			x.key(x.keys.shift, true)
		}
		x.key(p.code, true)
		x.key(p.code, false)
		x.sent(p.code)
		if p.shift && x.keys.shift != 0 {
			x.key(x.keys.shift, false)
		}
	}
	return nil
}

// chord presses keysyms in order and releases them in reverse.
func (x *xconn) chord(syms []uint32) error {
	if err := x.ensureSyms(syms); err != nil {
		return err
	}
	var codes []xproto.Keycode
	needShift := false
	for _, s := range syms {
		p, ok := x.keys.sym[s]
		if !ok {
			return errdefs.Invalid("key %#x: no keycode for it", s)
		}
		if p.shift {
			needShift = true
		}
		codes = append(codes, p.code)
	}
	if needShift && x.keys.shift != 0 {
		codes = append([]xproto.Keycode{x.keys.shift}, codes...)
	}
	for _, c := range codes {
		x.key(c, true)
		x.sent(c)
	}
	for i := len(codes) - 1; i >= 0; i-- {
		x.key(codes[i], false)
	}
	return nil
}

func buttonNumber(name string) (byte, error) {
	switch name {
	case "", "left":
		return 1, nil
	case "middle", "wheel":
		return 2, nil
	case "right":
		return 3, nil
	case "back":
		return 8, nil
	case "forward":
		return 9, nil
	}
	return 0, errdefs.Invalid("button %q: want left, right, middle, back or forward", name)
}

// validate checks an action without running it.
func validateAction(a *api.DesktopAction, w, h int) error {
	inScreen := func(px, py int) error {
		if px < 0 || py < 0 || px >= w || py >= h {
			return errdefs.Invalid("point (%d, %d) is off the %dx%d screen", px, py, w, h)
		}
		return nil
	}
	if (a.X == nil) != (a.Y == nil) {
		return errdefs.Invalid("give both x and y, or neither")
	}
	if a.X != nil {
		if err := inScreen(*a.X, *a.Y); err != nil {
			return err
		}
	}
	switch a.Type {
	case api.ActionMove:
		if a.X == nil {
			return errdefs.Invalid("move needs x and y")
		}
	case api.ActionClick, api.ActionMouseDown, api.ActionMouseUp:
		if _, err := buttonNumber(a.Button); err != nil {
			return err
		}
	case api.ActionDrag:
		if _, err := buttonNumber(a.Button); err != nil {
			return err
		}
		if len(a.Path) < 2 {
			return errdefs.Invalid("drag needs a path of two or more points")
		}
		for _, p := range a.Path {
			if err := inScreen(p.X, p.Y); err != nil {
				return err
			}
		}
	case api.ActionScroll:
		if a.DX == 0 && a.DY == 0 {
			return errdefs.Invalid("scroll needs dx or dy (notches)")
		}
		if abs(a.DX) > 1000 || abs(a.DY) > 1000 {
			return errdefs.Invalid("scroll dx and dy are at most 1000 notches")
		}
	case api.ActionType:
		if len(a.Text) > 1<<20 {
			return errdefs.Invalid("type text is over 1 MiB")
		}
	case api.ActionKey:
		if _, err := parseKeys(a.Keys); err != nil {
			return err
		}
	case api.ActionWait:
		if a.MS < 0 || a.MS > 60000 {
			return errdefs.Invalid("wait ms must be between 0 and 60000, got %d", a.MS)
		}
	default:
		return errdefs.Invalid("unknown action type %q: want move, click, mouse_down, mouse_up, drag, scroll, type, key or wait", a.Type)
	}
	return nil
}

func abs(i int) int {
	if i < 0 {
		return -i
	}
	return i
}

// run runs the actions in order; the first failure stops the batch and
// names its index. It returns once the X server has processed every
// event sent (a round trip), with the pointer's position.
func (x *xconn) run(ctx context.Context, acts []api.DesktopAction) (api.Point, error) {
	for i := range acts {
		if err := validateAction(&acts[i], x.width, x.height); err != nil {
			return api.Point{}, errdefs.Invalid("action %d (%s): %v", i, acts[i].Type, err)
		}
	}
	x.inMu.Lock()
	defer x.inMu.Unlock()
	if x.keys == nil {
		k, err := x.loadKeymap()
		if err != nil {
			return api.Point{}, err
		}
		x.keys = k
	}
	for i := range acts {
		if err := x.do(ctx, &acts[i]); err != nil {
			return api.Point{}, fmt.Errorf("action %d (%s): %w", i, acts[i].Type, err)
		}
	}
	return x.cursor()
}

func (x *xconn) moveTo(px, py int) { x.fake(evMotion, 0, px, py) }

func (x *xconn) do(ctx context.Context, a *api.DesktopAction) error {
	if a.X != nil && a.Type != api.ActionMove {
		x.moveTo(*a.X, *a.Y)
	}
	switch a.Type {
	case api.ActionClick, api.ActionMouseDown, api.ActionMouseUp, api.ActionDrag, api.ActionScroll:
		x.buttons(a)
		return x.settleButtons(ctx)
	case api.ActionMove:
		x.moveTo(*a.X, *a.Y)
	case api.ActionType:
		syms := make([]uint32, 0, len(a.Text))
		for _, r := range a.Text {
			syms = append(syms, runeKeysym(r))
		}
		return x.typeSyms(syms)
	case api.ActionKey:
		syms, err := parseKeys(a.Keys)
		if err != nil {
			return err
		}
		return x.chord(syms)
	case api.ActionWait:
		// Events sent so far are delivered before the wait.
		if _, err := x.cursor(); err != nil {
			return err
		}
		t := time.NewTimer(time.Duration(a.MS) * time.Millisecond)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// buttons sends a click, mouse_down, mouse_up, drag or scroll.
func (x *xconn) buttons(a *api.DesktopAction) {
	switch a.Type {
	case api.ActionClick:
		b, _ := buttonNumber(a.Button)
		n := 1
		if a.Double {
			n = 2
		}
		for range n {
			x.fake(evButtonPress, b, 0, 0)
			x.fake(evButtonRelease, b, 0, 0)
		}
	case api.ActionMouseDown:
		b, _ := buttonNumber(a.Button)
		x.fake(evButtonPress, b, 0, 0)
		x.held |= buttonMask(b)
	case api.ActionMouseUp:
		b, _ := buttonNumber(a.Button)
		x.fake(evButtonRelease, b, 0, 0)
		x.held &^= buttonMask(b)
	case api.ActionDrag:
		b, _ := buttonNumber(a.Button)
		p0 := a.Path[0]
		x.moveTo(p0.X, p0.Y)
		x.fake(evButtonPress, b, 0, 0)
		prev := p0
		for _, p := range a.Path[1:] {
			// A midpoint too: some widgets start a drag only after a
			// motion of a few pixels that is not the final one.
			x.moveTo((prev.X+p.X)/2, (prev.Y+p.Y)/2)
			x.moveTo(p.X, p.Y)
			prev = p
		}
		x.fake(evButtonRelease, b, 0, 0)
		x.held &^= buttonMask(b)
	case api.ActionScroll:
		scroll := func(n int, neg, pos byte) {
			b := pos
			if n < 0 {
				b, n = neg, -n
			}
			for range n {
				x.fake(evButtonPress, b, 0, 0)
				x.fake(evButtonRelease, b, 0, 0)
			}
		}
		scroll(a.DY, 4, 5)
		scroll(a.DX, 6, 7)
	}
}

// allButtons are the core state bits of buttons 1 to 5; buttons 6 and up
// have none.
const allButtons = xproto.KeyButMaskButton1 | xproto.KeyButMaskButton2 | xproto.KeyButMaskButton3 | xproto.KeyButMaskButton4 | xproto.KeyButMaskButton5

func buttonMask(b byte) uint16 {
	if b < 1 || b > 5 {
		return 0
	}
	return uint16(xproto.KeyButMaskButton1) << (b - 1)
}

// buttonSettleLimit bounds settleButtons' wait for another client to
// let the pointer go: a window manager answers in milliseconds, a person
// holding a button down in the live view may not.
const buttonSettleLimit = 30 * time.Second

// settleButtons waits until the server has processed every button event
// sent: until the buttons it reports held are the ones the agent holds.
//
// A round trip is not enough. A window manager that focuses a window on
// click (openbox does, for buttons 1 to 3) holds a synchronous passive
// grab on its clients' windows: a press activates the grab and freezes
// the pointer, the server queues the pointer events after it, and the
// press reaches the application only when the window manager replays it
// (AllowEvents ReplayPointer), however long that takes under load. The
// keyboard is not frozen: keys sent meanwhile reach the application
// before the click, and Chromium drops them (the input is not focused
// yet). The server updates the pointer's button state only as it
// processes each event, so once it shows the click's release the press
// and release have been delivered, and every later key is delivered
// after them.
func (x *xconn) settleButtons(ctx context.Context) error {
	deadline := time.Now().Add(buttonSettleLimit)
	wait := 200 * time.Microsecond
	for {
		rep, err := xproto.QueryPointer(x.c, x.root).Reply()
		if err != nil {
			return fmt.Errorf("QueryPointer: %w", err)
		}
		held := rep.Mask & allButtons
		if held == x.held {
			return nil
		}
		if time.Now().After(deadline) {
			return errdefs.Unavailable("the pointer's buttons are %#x after %v, want %#x: another client holds a button or freezes the pointer with a grab", held>>8, buttonSettleLimit, x.held>>8)
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		}
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// cursor asks the server where the pointer is (a round trip: every
// request sent before has been processed when it answers).
func (x *xconn) cursor() (api.Point, error) {
	rep, err := xproto.QueryPointer(x.c, x.root).Reply()
	if err != nil {
		return api.Point{}, fmt.Errorf("QueryPointer: %w", err)
	}
	return api.Point{X: int(rep.RootX), Y: int(rep.RootY)}, nil
}
