package server

import (
	"errors"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
)

// forward sends an exec or file request to the sandbox's guest agent and
// streams the answer back as it comes. The request body streams too, and
// both directions run at once (exec/stream sends stdin while output flows).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rt, err := s.svc.Guest(r.Context(), tenant(r), id)
	if err != nil {
		writeError(w, err)
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.EnableFullDuplex()
	path := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"+id)
	out, err := http.NewRequestWithContext(r.Context(), r.Method, "http://guest"+path, r.Body)
	if err != nil {
		writeError(w, errdefs.Invalid("bad request: %v", err))
		return
	}
	out.URL.RawQuery = r.URL.RawQuery
	out.ContentLength = r.ContentLength
	for _, h := range []string{"Content-Type", "Content-Encoding", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		writeError(w, errdefs.Unavailable("sandbox %s: guest agent: %v", id, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Content-Length", "Content-Disposition"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	streaming := strings.HasPrefix(resp.Header.Get("Content-Type"), "application/x-ndjson")
	buf := make([]byte, 64<<10)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if streaming {
				_ = rc.Flush()
			}
		}
		if rerr != nil {
			if !errors.Is(rerr, io.EOF) {
				s.log.Debug("forward: reading guest response", "sandbox", id, "err", rerr)
			}
			return
		}
	}
}
