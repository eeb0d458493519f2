package server

import (
	"io"
	"net/http"
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
	c, err := client.New(client.WithHost("http://agentbox.in-process"), client.WithoutEnvironment(),
		client.WithAdminKeyPath(""), client.WithUserAgent("agentbox-mcp"),
		client.WithHTTPClient(&http.Client{Transport: inProcess{s: s, p: p}}))
	if err != nil {
		panic("server: in-process client: " + err.Error()) // the host above always parses
	}
	return c
}

type inProcess struct {
	s *Server
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
			w.WriteHeader(http.StatusOK) // a handler that wrote nothing
			pw.Close()
		}()
		t.s.mux.ServeHTTP(w, r)
	}()
	select {
	case <-w.ready:
	case <-ctx.Done():
		pr.CloseWithError(ctx.Err())
		return nil, ctx.Err()
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
}

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
