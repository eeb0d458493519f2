package desktop

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// streamServer is the live view: on 127.0.0.1:port in the sandbox (the
// daemon's preview proxy reaches it like any sandbox port, with the
// sandbox's token), it serves noVNC's static files and relays
// /websockify byte for byte to x11vnc, which speaks WebSocket itself:
// the relay needs no WebSocket code. View-only is x11vnc's: the view-only
// password cannot send input.
type streamServer struct {
	srv *http.Server
	ln  net.Listener
	wg  sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
}

func newStreamServer(port, vncPort int, dir string, log *slog.Logger) (*streamServer, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("the live view's port %d: %w", port, err)
	}
	s := &streamServer{ln: ln, conns: map[net.Conn]struct{}{}}
	mux := http.NewServeMux()
	vnc := net.JoinHostPort("127.0.0.1", strconv.Itoa(vncPort))
	mux.HandleFunc("/websockify", func(w http.ResponseWriter, r *http.Request) { s.relay(w, r, vnc, log) })
	files := http.FileServer(http.Dir(dir))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/" {
			// The page itself; the preview proxy keeps the query.
			q := r.URL.RawQuery
			if q == "" {
				q = "autoconnect=true&resize=scale&path=websockify"
			}
			http.Redirect(w, r, "/vnc.html?"+q, http.StatusFound)
			return
		}
		w.Header().Set("Cache-Control", "no-store")
		files.ServeHTTP(w, r)
	})
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 30 * time.Second}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		s.srv.Serve(ln)
	}()
	return s, nil
}

// relay hands the WebSocket request to x11vnc unchanged and copies bytes
// both ways until either side closes.
func (s *streamServer) relay(w http.ResponseWriter, r *http.Request, vnc string, log *slog.Logger) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(w, "this is the live view's WebSocket: connect with a WebSocket client (noVNC)", http.StatusBadRequest)
		return
	}
	up, err := net.DialTimeout("tcp", vnc, 5*time.Second)
	if err != nil {
		http.Error(w, "the desktop's VNC server is not answering: "+err.Error(), http.StatusBadGateway)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "cannot take over the connection", http.StatusInternalServerError)
		return
	}
	c, brw, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if !s.track(c, up) {
		return
	}
	defer s.untrack(c, up)
	// The request as it came (x11vnc reads the handshake headers). Its
	// WebSocket code refuses a handshake without Origin, which browsers
	// always send and other clients may not: one is added then.
	var b strings.Builder
	fmt.Fprintf(&b, "GET %s HTTP/1.1\r\nHost: %s\r\n", r.URL.RequestURI(), r.Host)
	if r.Header.Get("Origin") == "" {
		fmt.Fprintf(&b, "Origin: http://%s\r\n", r.Host)
	}
	r.Header.Write(&b)
	b.WriteString("\r\n")
	if _, err := io.WriteString(up, b.String()); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() {
		// Bytes the server already read past the request go first.
		if n := brw.Reader.Buffered(); n > 0 {
			p, _ := brw.Reader.Peek(n)
			up.Write(p)
		}
		io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		done <- struct{}{}
	}()
	go func() {
		io.Copy(c, up)
		if tc, ok := c.(*net.TCPConn); ok {
			tc.CloseWrite()
		} else {
			c.Close()
		}
		done <- struct{}{}
	}()
	<-done
	<-done
}

func (s *streamServer) track(cs ...net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conns == nil {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		s.conns[c] = struct{}{}
	}
	return true
}

func (s *streamServer) untrack(cs ...net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, c := range cs {
		c.Close()
		delete(s.conns, c)
	}
}

// close stops serving and cuts the live connections.
func (s *streamServer) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	s.srv.Shutdown(ctx)
	s.srv.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
	s.mu.Unlock()
}
