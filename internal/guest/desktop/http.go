package desktop

import (
	"bytes"
	"net/http"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/guest/reply"
)

// maxBody caps a request body (a type action's text is in it).
const maxBody = 4 << 20

// Register adds the /desktop routes of the guest protocol to mux.
func (m *Manager) Register(mux *http.ServeMux) {
	mux.HandleFunc(proto.DesktopStart.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var req api.StartDesktopRequest
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		d, err := m.Start(r.Context(), req)
		answer(w, http.StatusOK, d, err)
	})
	mux.HandleFunc(proto.DesktopGet.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, m.Get())
	})
	mux.HandleFunc(proto.DesktopStop.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		if err := m.Stop(); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc(proto.DesktopScreenshot.Pattern(), m.handleScreenshot)
	mux.HandleFunc(proto.DesktopActions.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var req api.DesktopActionsRequest
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		res, err := m.Actions(r.Context(), req)
		answer(w, http.StatusOK, res, err)
	})
	mux.HandleFunc(proto.DesktopCursor.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		p, err := m.Cursor()
		answer(w, http.StatusOK, p, err)
	})
	mux.HandleFunc(proto.DesktopWindows.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		l, err := m.Windows()
		answer(w, http.StatusOK, l, err)
	})
	mux.HandleFunc(proto.DesktopLaunch.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var req api.DesktopLaunchRequest
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		p, err := m.Launch(req)
		answer(w, http.StatusCreated, p, err)
	})
	mux.HandleFunc(proto.DesktopOpen.Pattern(), func(w http.ResponseWriter, r *http.Request) {
		var req api.DesktopOpenRequest
		if err := decode(w, r, &req); err != nil {
			writeError(w, err)
			return
		}
		p, err := m.Open(req)
		answer(w, http.StatusCreated, p, err)
	})
}

func (m *Manager) handleScreenshot(w http.ResponseWriter, r *http.Request) {
	o, err := queryShotOptions(r.URL.Query())
	if err != nil {
		writeError(w, err)
		return
	}
	var buf bytes.Buffer
	var t shotTiming
	sw, sh, iw, ih, format, err := m.Screenshot(&buf, o, &t)
	if err != nil {
		writeError(w, err)
		return
	}
	h := w.Header()
	h.Set("Server-Timing", t.header())
	h.Set("Content-Type", "image/"+format)
	h.Set("Content-Length", strconv.Itoa(buf.Len()))
	h.Set("Cache-Control", "no-store")
	h.Set("X-Screen-Width", strconv.Itoa(sw))
	h.Set("X-Screen-Height", strconv.Itoa(sh))
	h.Set("X-Image-Width", strconv.Itoa(iw))
	h.Set("X-Image-Height", strconv.Itoa(ih))
	w.WriteHeader(http.StatusOK)
	w.Write(buf.Bytes())
}

func decode(w http.ResponseWriter, r *http.Request, v any) error {
	return reply.Decode(w, r, v, maxBody, "")
}

var (
	answer     = reply.Answer
	writeJSON  = reply.JSON
	writeError = reply.Error
)
