package desktop

import (
	"strings"
	"unicode/utf8"

	"github.com/agentbox/agentbox/errdefs"
)

// keysymNames maps the key names of a chord ("ctrl+l", "Return",
// "Page_Down") to X keysyms. Lookups are case-insensitive; X's own names
// of the usual keys are here, and the short forms agents send (E2B's and
// Anthropic's tool names: ctrl, alt, cmd, enter, esc, pageup, arrowleft).
var keysymNames = map[string]uint32{
	"shift": 0xffe1, "shift_l": 0xffe1, "shift_r": 0xffe2,
	"ctrl": 0xffe3, "control": 0xffe3, "control_l": 0xffe3, "control_r": 0xffe4, "ctrl_l": 0xffe3, "ctrl_r": 0xffe4,
	"alt": 0xffe9, "alt_l": 0xffe9, "alt_r": 0xffea, "option": 0xffe9,
	"meta": 0xffe7, "meta_l": 0xffe7, "meta_r": 0xffe8,
	"super": 0xffeb, "super_l": 0xffeb, "super_r": 0xffec, "win": 0xffeb, "windows": 0xffeb, "cmd": 0xffeb, "command": 0xffeb,
	"capslock": 0xffe5, "caps_lock": 0xffe5,
	"enter": 0xff0d, "return": 0xff0d, "kp_enter": 0xff8d,
	"tab": 0xff09, "iso_left_tab": 0xfe20,
	"esc": 0xff1b, "escape": 0xff1b,
	"backspace": 0xff08, "back_space": 0xff08,
	"delete": 0xffff, "del": 0xffff, "insert": 0xff63, "ins": 0xff63,
	"home": 0xff50, "end": 0xff57,
	"pageup": 0xff55, "page_up": 0xff55, "prior": 0xff55, "pgup": 0xff55,
	"pagedown": 0xff56, "page_down": 0xff56, "next": 0xff56, "pgdn": 0xff56,
	"up": 0xff52, "down": 0xff54, "left": 0xff51, "right": 0xff53,
	"arrowup": 0xff52, "arrowdown": 0xff54, "arrowleft": 0xff51, "arrowright": 0xff53,
	"space": 0x20, "spacebar": 0x20,
	"menu": 0xff67, "print": 0xff61, "printscreen": 0xff61, "print_screen": 0xff61,
	"scroll_lock": 0xff14, "pause": 0xff13, "break": 0xff6b, "num_lock": 0xff7f,
	"minus": 0x2d, "plus": 0x2b, "equal": 0x3d, "comma": 0x2c, "period": 0x2e,
	"slash": 0x2f, "backslash": 0x5c, "semicolon": 0x3b, "apostrophe": 0x27,
	"grave": 0x60, "bracketleft": 0x5b, "bracketright": 0x5d,
	"asterisk": 0x2a, "at": 0x40, "numbersign": 0x23, "dollar": 0x24,
	"percent": 0x25, "ampersand": 0x26, "parenleft": 0x28, "parenright": 0x29,
	"underscore": 0x5f, "colon": 0x3a, "quotedbl": 0x22, "less": 0x3c,
	"greater": 0x3e, "question": 0x3f, "exclam": 0x21, "bar": 0x7c,
	"braceleft": 0x7b, "braceright": 0x7d, "asciitilde": 0x7e, "asciicircum": 0x5e,
	"audiovolumeup": 0x1008ff13, "audiovolumedown": 0x1008ff11, "audiomute": 0x1008ff12,
}

func init() {
	for i := uint32(1); i <= 24; i++ {
		keysymNames["f"+itoa(int(i))] = 0xffbe + i - 1
	}
	for i := uint32(0); i <= 9; i++ {
		keysymNames["kp_"+itoa(int(i))] = 0xffb0 + i
	}
}

func itoa(i int) string {
	if i < 10 {
		return string(rune('0' + i))
	}
	return itoa(i/10) + string(rune('0'+i%10))
}

// runeKeysym is the keysym of a character: Latin-1 maps to itself, the
// rest to the Unicode keysym range (0x01000000 | code point); newline and
// tab type Return and Tab.
func runeKeysym(r rune) uint32 {
	switch {
	case r == '\n' || r == '\r':
		return 0xff0d
	case r == '\t':
		return 0xff09
	case r == '\b':
		return 0xff08
	case r >= 0x20 && r <= 0x7e, r >= 0xa0 && r <= 0xff:
		return uint32(r)
	}
	return 0x01000000 | uint32(r)
}

// parseKeys reads a chord, "ctrl+shift+t", "Return", "ctrl+plus", "a"
// into keysyms in press order. A "+" on its own (or doubled, "ctrl++")
// is the plus key.
func parseKeys(s string) ([]uint32, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, errdefs.Invalid("keys is empty; send a chord like \"ctrl+l\" or a key name like \"Return\"")
	}
	var parts []string
	if s == "+" {
		parts = []string{"+"}
	} else {
		if strings.HasSuffix(s, "++") {
			parts = append(strings.Split(strings.TrimSuffix(s, "++"), "+"), "+")
		} else {
			parts = strings.Split(s, "+")
		}
	}
	syms := make([]uint32, 0, len(parts))
	for _, p := range parts {
		p = strings.TrimSpace(p)
		if p == "" {
			return nil, errdefs.Invalid("keys %q has an empty key name; join keys with \"+\" like \"ctrl+shift+t\"", s)
		}
		if sym, ok := keysymNames[strings.ToLower(p)]; ok {
			syms = append(syms, sym)
			continue
		}
		if r, size := utf8.DecodeRuneInString(p); size == len(p) && r != utf8.RuneError {
			syms = append(syms, runeKeysym(r))
			continue
		}
		return nil, errdefs.Invalid("keys %q: unknown key %q; use a character or a name like ctrl, alt, shift, super, Return, Tab, Escape, BackSpace, Delete, Home, End, Page_Up, Page_Down, Up, Down, Left, Right, F1-F24", s, p)
	}
	return syms, nil
}
