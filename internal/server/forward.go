package server

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// forward sends an exec or file request to the sandbox's guest agent and
// streams the answer back as it comes. The request body streams too, and
// both directions run at once (exec/stream sends stdin while output flows).
func (s *Server) forward(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	rt, err := s.svc.Guest(r.Context(), scope(r), id)
	if err != nil {
		writeError(w, err)
		return
	}
	if isUpgrade(r) {
		s.forwardUpgrade(w, r, rt, id)
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
	// A download is capped (Service.DownloadLimit): the guest answers 413
	// past the limit before the first byte, and this copy stops a guest
	// that sends more anyway at the limit plus the tar framing's slack.
	var cutAt int64
	if r.Method == http.MethodGet && (path == proto.FileGet.Path || path == proto.ArchiveGet.Path) {
		limit, err := s.svc.DownloadLimit(r.Context(), scope(r), id)
		if err != nil {
			writeError(w, err)
			return
		}
		if limit > 0 {
			q := r.URL.Query()
			q.Set("max_bytes", strconv.FormatInt(limit, 10))
			out.URL.RawQuery = q.Encode()
			cutAt = limit + limit/16 + 1<<20
		}
	}
	out.ContentLength = r.ContentLength
	if strings.HasSuffix(path, "/stream") || strings.HasSuffix(path, "/files/watch") {
		// A stream gets a connection to the guest of its own. Reusing a
		// keep-alive connection for a full-duplex stream lost about one
		// stream in a hundred (the guest saw its request's context end
		// between start and exit); a unix connect costs microseconds,
		// and a stream lives long anyway.
		// TestExecStreamReusedConnection holds this.
		out.Close = true
	}
	for _, h := range []string{"Content-Type", "Content-Encoding", "Accept"} {
		if v := r.Header.Get(h); v != "" {
			out.Header.Set(h, v)
		}
	}
	if r.ContentLength == 0 {
		out.Body = nil
	}
	sentAt := time.Now()
	resp, err := rt.RoundTrip(out)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client went away
		}
		writeError(w, errdefs.Unavailable("sandbox %s: guest agent: %v", id, err))
		return
	}
	defer resp.Body.Close()
	for _, h := range forwardedHeaders {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if v := resp.Header.Get("Server-Timing"); v != "" {
		// The guest's own timings, and the daemon's wait for its
		// answer's headers (those plus the guest channel's latency).
		w.Header().Set("Server-Timing", v+", guest;dur="+strconv.FormatFloat(float64(time.Since(sentAt).Microseconds())/1000, 'f', 2, 64))
	}
	w.WriteHeader(resp.StatusCode)
	ct := resp.Header.Get("Content-Type")
	streaming := strings.HasPrefix(ct, "application/x-ndjson") || strings.HasPrefix(ct, api.FramesContentType)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	var sent int64
	for {
		n, rerr := resp.Body.Read(buf)
		if sent += int64(n); cutAt > 0 && sent > cutAt {
			s.log.Warn("forward: a download went past its limit; cut", "sandbox", id, "limit", cutAt)
			panic(http.ErrAbortHandler)
		}
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

// forwardedHeaders are the guest's answer headers that reach the
// client: the body's, and a desktop screenshot's sizes. A guest's
// Server-Timing is passed on with the daemon's own entry added.
var forwardedHeaders = []string{"Content-Type", "Content-Length", "Content-Disposition",
	"X-Screen-Width", "X-Screen-Height", "X-Image-Width", "X-Image-Height"}

// copyBufs are forward's copy buffers: clearing a fresh 64 KiB for every
// exec was 1% of the daemon's CPU during a run of execs (perf), besides
// the garbage.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 64<<10); return &b }}

// isUpgrade says r asks to switch protocols (a WebSocket).
func isUpgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && headerHas(r.Header, "Connection", "upgrade")
}

func headerHas(h http.Header, key, token string) bool {
	for _, v := range h.Values(key) {
		for f := range strings.SplitSeq(v, ",") {
			if strings.EqualFold(strings.TrimSpace(f), token) {
				return true
			}
		}
	}
	return false
}

// forwardUpgrade proxies a protocol switch (PTY WebSockets): the request
// goes to the guest with its Connection, Upgrade and Sec-WebSocket-*
// headers; on 101 both connections are taken over and bytes are copied
// both ways until either side closes. Any other answer is passed back as
// it is.
func (s *Server) forwardUpgrade(w http.ResponseWriter, r *http.Request, rt http.RoundTripper, id string) {
	path := strings.TrimPrefix(r.URL.Path, "/v1/sandboxes/"+id)
	// The upgraded connection outlives nothing of the request but this
	// handler; it must not be cut by the request's context machinery.
	ctx := context.WithoutCancel(r.Context())
	out, err := http.NewRequestWithContext(ctx, r.Method, "http://guest"+path, nil)
	if err != nil {
		writeError(w, errdefs.Invalid("bad request: %v", err))
		return
	}
	out.URL.RawQuery = r.URL.RawQuery
	for k, vs := range r.Header {
		if k == "Connection" || k == "Upgrade" || strings.HasPrefix(k, "Sec-Websocket-") {
			out.Header[k] = vs
		}
	}
	resp, err := rt.RoundTrip(out)
	if err != nil {
		writeError(w, errdefs.Unavailable("sandbox %s: guest agent: %v", id, err))
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusSwitchingProtocols {
		for _, h := range []string{"Content-Type", "Content-Length"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
		return
	}
	guest, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		writeError(w, errdefs.Unavailable("sandbox %s: the guest switched protocols on a connection that cannot be taken over", id))
		return
	}
	conn, brw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		writeError(w, errdefs.Unavailable("taking over the connection for %s: %v", path, err))
		return
	}
	defer conn.Close()
	conn.SetDeadline(time.Time{})
	brw.WriteString("HTTP/1.1 101 Switching Protocols\r\n")
	resp.Header.Write(brw)
	brw.WriteString("\r\n")
	if err := brw.Flush(); err != nil {
		return
	}
	splice(conn, brw.Reader, guest)
}

// splice copies client->guest (starting with what the server already
// buffered) and guest->client until one direction ends, then closes both.
func splice(client net.Conn, buffered *bufio.Reader, guest io.ReadWriteCloser) {
	var once sync.Once
	stop := func() { once.Do(func() { client.Close(); guest.Close() }) }
	done := make(chan struct{})
	go func() {
		defer close(done)
		io.Copy(guest, buffered) // buffered reads on from client when empty
		stop()
	}()
	io.Copy(client, guest)
	stop()
	<-done
}
