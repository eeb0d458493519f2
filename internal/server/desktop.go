package server

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guestclient"
)

// The desktop's routes are the guest's (forwarded), but for its live
// view's URL: only the daemon knows the preview domain and the sandbox's
// token.

func (s *Server) desktopHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET " + api.SandboxPrefix + "/desktop/stream": s.desktopStream,
	}
}

// desktopStream answers GET /v1/sandboxes/{id}/desktop/stream: the
// noVNC page of the sandbox's port 6080 through the preview proxy, with
// the sandbox's preview token and the RFB password of the access asked
// for (view_only=true, the default, or false), which the guest agent
// reports in its desktop state.
func (s *Server) desktopStream(w http.ResponseWriter, r *http.Request) {
	viewOnly := true
	if v := r.URL.Query().Get("view_only"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeError(w, errdefs.Invalid("view_only must be true or false, got %q", v))
			return
		}
		viewOnly = b
	}
	id := r.PathValue("id")
	sb, err := s.svc.Get(r.Context(), scope(r), id)
	if err != nil {
		writeError(w, err)
		return
	}
	rt, err := s.svc.Guest(r.Context(), scope(r), id)
	if err != nil {
		writeError(w, err)
		return
	}
	d, err := guestDesktop(r.Context(), rt)
	if err != nil {
		writeError(w, err)
		return
	}
	if d.State != api.DesktopRunning {
		writeError(w, errdefs.Precondition("sandbox %s's desktop is %s; start it first (POST /v1/sandboxes/%s/desktop, `agentbox desktop start %s`)", id, d.State, id, id))
		return
	}
	// x11vnc holds both passwords and enforces view-only itself: a viewer
	// that logs in with the view-only one cannot send input, whatever the
	// page asks.
	pw := d.VNCPassword
	if viewOnly {
		pw = d.VNCViewPassword
	}
	if pw == "" {
		writeError(w, errdefs.Unavailable("sandbox %s's guest agent gave no VNC password for the live view", id))
		return
	}
	port := d.StreamPort
	if port == 0 {
		port = api.DesktopStreamPort
	}
	u, err := streamURL(sb, port, pw, viewOnly)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.DesktopStream{URL: u, ViewOnly: viewOnly})
}

// guestDesktop asks the guest agent for the desktop's state.
func guestDesktop(ctx context.Context, rt http.RoundTripper) (*api.Desktop, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://guest/desktop", nil)
	if err != nil {
		return nil, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return nil, errdefs.Unavailable("guest agent: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return nil, guestclient.StatusError(resp)
	}
	var d api.Desktop
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		return nil, errdefs.Unavailable("reading the guest agent's desktop state: %v", err)
	}
	return &d, nil
}

// streamURL is the noVNC page's URL on sb's preview port.
func streamURL(sb *api.Sandbox, port int, password string, viewOnly bool) (string, error) {
	base, err := client.PreviewURL(sb, port)
	if err != nil {
		return "", errdefs.Precondition("%v", err)
	}
	pu, err := url.Parse(base)
	if err != nil {
		return "", err
	}
	q := pu.Query() // the token, when the preview needs one
	q.Set("autoconnect", "true")
	q.Set("resize", "scale")
	q.Set("path", "websockify")
	q.Set("view_only", strconv.FormatBool(viewOnly))
	q.Set("password", password)
	pu.Path = "/vnc.html"
	pu.RawQuery = q.Encode()
	return pu.String(), nil
}
