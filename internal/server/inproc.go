package server

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// inProcessClient returns a Go SDK client whose requests the server's own
// routes serve in this process, as p: no socket, no key, no rate limit and
// no audit entry of their own (the MCP tool call that makes them has one).
// Bodies stream both ways, so streaming exec works.
func (s *Server) inProcessClient(p auth.Principal) *client.Client {
	return InProcessClient(s.mux, p)
}

// InProcessClient returns a Go SDK client whose every request h serves in
// this process, acting as p: the request's context carries p
// (tenancy.With), as it would after authentication, and no key is sent.
// h is a router that reads the principal from the context: a daemon's
// routes (after its authentication) or a fleet gateway's, so that what
// the E2B API and the MCP tools call is placed and routed as any
// client's call. Bodies stream both ways (streaming exec) and a
// protocol switch (a PTY's WebSocket) works through a handler that
// hijacks the connection.
func InProcessClient(h http.Handler, p auth.Principal) *client.Client {
	c, err := client.New(client.WithHost("http://agentbox.in-process"), client.WithoutEnvironment(),
		client.WithAdminKeyPath(""), client.WithUserAgent("agentbox-mcp"),
		client.WithHTTPClient(&http.Client{Transport: inProcess{h: h, p: p}}))
	if err != nil {
		panic("server: in-process client: " + err.Error()) // the host above always parses
	}
	return c
}

type inProcess struct {
	h http.Handler
	p auth.Principal
}

func (t inProcess) RoundTrip(r *http.Request) (*http.Response, error) {
	ctx := tenancy.With(r.Context(), t.p)
	r = r.WithContext(ctx)
	switch {
	case r.Body == nil || r.Body == http.NoBody:
		r.Body, r.ContentLength = http.NoBody, 0
	case r.ContentLength == 0:
		// A client request's 0 with a body means unknown; a server
		// request says unknown as -1 (forward.go sends no body for 0).
		r.ContentLength = -1
	}
	pr, pw := io.Pipe()
	w := &pipeResponse{header: http.Header{}, pw: pw, ready: make(chan struct{})}
	go func() {
		defer func() {
			if v := recover(); v != nil {
				// What net/http's server does with a handler's panic:
				// the exchange ends with an error, the process goes on.
				// http.ErrAbortHandler is how a handler aborts (a
				// ReverseProxy whose copy failed because this caller
				// went away); any other panic is logged with its stack.
				err := fmt.Errorf("in-process %s %s: the handler aborted", r.Method, r.URL.Path)
				if v != http.ErrAbortHandler {
					slog.Error("panic in an in-process request", "method", r.Method, "path", r.URL.Path, "panic", v, "stack", string(debug.Stack()))
				}
				w.fail(err)
				pw.CloseWithError(err)
				return
			}
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			pw.Close()
		}()
		t.h.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
	}
	if w.err != nil {
		pr.Close()
		return nil, w.err
	}
	if w.hijacked != nil {
		// A protocol switch (a PTY's WebSocket): the handler wrote its
		// 101 answer on the connection; the caller gets that connection
		// as the body, to read and write, as from net/http's transport.
		pr.Close()
		br := bufio.NewReader(w.hijacked)
		resp, err := http.ReadResponse(br, r)
		if err != nil {
			w.hijacked.Close()
			return nil, err
		}
		resp.Body = &upgraded{Reader: br, Conn: w.hijacked}
		return resp, nil
	}
	return &http.Response{Status: http.StatusText(w.status), StatusCode: w.status, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: w.sent, Body: pr, ContentLength: -1, Request: r}, nil
}

// pipeResponse is the ResponseWriter of an in-process request: the body
// goes through a pipe to the caller as the handler writes it.
type pipeResponse struct {
	header http.Header
	pw     *io.PipeWriter
	once   sync.Once
	ready  chan struct{}
	status int
	sent   http.Header // the header as of WriteHeader
	// hijacked is the caller's end of the connection a handler took over.
	hijacked net.Conn
	// err is why the handler ended before it answered (it panicked).
	err error
}

// fail ends a response whose handler panicked before it answered.
func (w *pipeResponse) fail(err error) {
	w.once.Do(func() {
		w.err = err
		close(w.ready)
	})
}

// Hijack gives the handler one end of an in-memory connection whose other
// end becomes the caller's response body (see RoundTrip).
func (w *pipeResponse) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	srv, cli := net.Pipe()
	took := false
	w.once.Do(func() {
		w.hijacked, took = cli, true
		close(w.ready)
	})
	if !took {
		srv.Close()
		cli.Close()
		return nil, nil, errors.New("in-process connection: the response has already started")
	}
	return srv, bufio.NewReadWriter(bufio.NewReader(srv), bufio.NewWriter(srv)), nil
}

// upgraded is the body of a switched protocol: reads come through the
// reader that parsed the 101 answer, writes go to the connection.
type upgraded struct {
	*bufio.Reader
	net.Conn
}

func (u *upgraded) Read(b []byte) (int, error) { return u.Reader.Read(b) }

func (w *pipeResponse) Header() http.Header { return w.header }

func (w *pipeResponse) WriteHeader(code int) {
	w.once.Do(func() {
		w.status, w.sent = code, w.header.Clone()
		close(w.ready)
	})
}

func (w *pipeResponse) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	return w.pw.Write(b)
}

// Flush is a no-op: every Write reaches the reader at once.
func (w *pipeResponse) Flush() {}
