package desktop

import (
	"bytes"
	"encoding/binary"

	"github.com/jezek/xgb/xproto"

	"github.com/agentbox/agentbox/api"
)

// Windows lists the top-level windows: the window manager's client list
// (EWMH _NET_CLIENT_LIST, openbox keeps it), or without one the root's
// mapped children.
func (m *Manager) Windows() (api.DesktopWindowList, error) {
	x, err := m.conn()
	if err != nil {
		return api.DesktopWindowList{}, err
	}
	return x.windows()
}

func (x *xconn) windows() (api.DesktopWindowList, error) {
	list := api.DesktopWindowList{Windows: []api.DesktopWindow{}}
	ids, err := x.windowsProp(x.root, "_NET_CLIENT_LIST")
	if err != nil {
		return list, err
	}
	if ids == nil {
		tree, err := xproto.QueryTree(x.c, x.root).Reply()
		if err != nil {
			return list, err
		}
		for _, w := range tree.Children {
			a, err := xproto.GetWindowAttributes(x.c, w).Reply()
			if err == nil && a.MapState == xproto.MapStateViewable && !a.OverrideRedirect {
				ids = append(ids, w)
			}
		}
	}
	var active xproto.Window
	if a, _ := x.windowsProp(x.root, "_NET_ACTIVE_WINDOW"); len(a) > 0 {
		active = a[0]
	} else if f, err := xproto.GetInputFocus(x.c).Reply(); err == nil {
		active = f.Focus
	}
	for _, w := range ids {
		dw := api.DesktopWindow{ID: uint32(w), Focused: w == active}
		dw.Title = x.title(w)
		if cls := x.prop(w, "WM_CLASS"); cls != nil {
			parts := bytes.Split(bytes.TrimRight(cls, "\x00"), []byte{0})
			dw.App = string(parts[len(parts)-1])
		}
		if pid := x.prop(w, "_NET_WM_PID"); len(pid) >= 4 {
			dw.Pid = int(binary.LittleEndian.Uint32(pid))
		}
		if g, err := xproto.GetGeometry(x.c, xproto.Drawable(w)).Reply(); err == nil {
			dw.Width, dw.Height = int(g.Width), int(g.Height)
			if t, err := xproto.TranslateCoordinates(x.c, w, x.root, 0, 0).Reply(); err == nil {
				dw.X, dw.Y = int(t.DstX), int(t.DstY)
			}
		} else {
			continue // gone meanwhile
		}
		list.Windows = append(list.Windows, dw)
	}
	return list, nil
}

// title is _NET_WM_NAME (UTF-8), else WM_NAME.
func (x *xconn) title(w xproto.Window) string {
	if t := x.prop(w, "_NET_WM_NAME"); t != nil {
		return string(t)
	}
	return string(x.prop(w, "WM_NAME"))
}

// prop reads a property's bytes (nil when unset).
func (x *xconn) prop(w xproto.Window, name string) []byte {
	a, err := x.atom(name)
	if err != nil {
		return nil
	}
	rep, err := xproto.GetProperty(x.c, false, w, a, xproto.GetPropertyTypeAny, 0, 1<<16).Reply()
	if err != nil || rep.Format == 0 {
		return nil
	}
	return rep.Value
}

// windowsProp reads a WINDOW[] property (nil when unset).
func (x *xconn) windowsProp(w xproto.Window, name string) ([]xproto.Window, error) {
	a, err := x.atom(name)
	if err != nil {
		return nil, err
	}
	rep, err := xproto.GetProperty(x.c, false, w, a, xproto.AtomWindow, 0, 1<<16).Reply()
	if err != nil {
		return nil, err
	}
	if rep.Format != 32 {
		return nil, nil
	}
	ids := make([]xproto.Window, 0, len(rep.Value)/4)
	for i := 0; i+4 <= len(rep.Value); i += 4 {
		if id := binary.LittleEndian.Uint32(rep.Value[i:]); id != 0 {
			ids = append(ids, xproto.Window(id))
		}
	}
	return ids, nil
}
