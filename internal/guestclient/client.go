// Package guestclient is the daemon's typed client of the guest protocol
// (internal/guest/proto): the service, the drivers and the driver
// conformance suite call the guest agent through it instead of building
// requests by hand. Every request is built from proto's route table.
//
// A Client wraps an http.RoundTripper that reaches one sandbox's agent
// (the service's per-sandbox transport, which keeps connections alive),
// or dials a connection per request (Dial, Unix). Two hot paths write on
// a connection the caller already holds, without a transport: SetEnvOn
// (a warm pool claim) and DialPortOn (a preview or ready check's tunnel).
//
// Errors: a request that got no answer is errdefs.Unavailable ("guest
// agent: ...", Unreachable says so); an answer other than 2xx is the agent's api.ErrorBody turned
// back into its errdefs class, or errdefs.Unavailable with the status.
package guestclient

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
	"github.com/agentbox/agentbox/internal/tracing"
)

// Client calls one guest agent.
type Client struct {
	rt http.RoundTripper
}

// New returns a client that sends its requests through rt.
func New(rt http.RoundTripper) *Client { return &Client{rt: rt} }

// Dial returns a client that opens a connection of its own for every
// request with dial, and closes it after the answer.
func Dial(dial func(ctx context.Context) (net.Conn, error)) *Client {
	return New(&http.Transport{
		DialContext:        func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
		DisableKeepAlives:  true,
		DisableCompression: true,
	})
}

// Unix returns a client that dials the agent's unix socket at path for
// every request.
func Unix(path string) *Client {
	return Dial(func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	})
}

// request is one call: a route, its wildcards' values, a query and a body.
type request struct {
	route  proto.Route
	args   []string
	query  url.Values
	body   io.Reader
	ctype  string
	length int64 // of body, when known; -1 unknown
}

// do sends r and returns the answer if it is 2xx; any other answer is
// read, closed and returned as an error.
func (c *Client) do(ctx context.Context, r request) (*http.Response, error) {
	u := r.route.URL(r.args...)
	if len(r.query) > 0 {
		u += "?" + r.query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, r.route.Method, u, r.body)
	if err != nil {
		return nil, err
	}
	if r.ctype != "" {
		req.Header.Set("Content-Type", r.ctype)
	}
	resp, err := tracing.RoundTrip(c.rt, req) // a span when ctx is traced
	if err != nil {
		return nil, unreachableError{errdefs.Unavailable("guest agent: %v", err)}
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		return nil, StatusError(resp)
	}
	return resp, nil
}

// call sends r and decodes a JSON answer into out (nil: drains it).
func (c *Client) call(ctx context.Context, r request, out any) error {
	resp, err := c.do(ctx, r)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("reading the guest agent's answer to %s: %w", r.route.Pattern(), err)
	}
	return nil
}

// jsonBody is v as a request body.
func jsonBody(v any) (io.Reader, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return bytes.NewReader(b), nil
}

// unreachableError is a request that got no answer.
type unreachableError struct{ error }

func (e unreachableError) Unwrap() error { return e.error }

// Unreachable says err is a request that got no answer from the agent
// (as opposed to an answer that is an error).
func Unreachable(err error) bool {
	var u unreachableError
	return errors.As(err, &u)
}

// StatusError turns an agent's answer other than 2xx into an error: its
// api.ErrorBody in its errdefs class, or errdefs.Unavailable with the
// status. It reads at most 64 KiB of resp's body and does not close it.
func StatusError(resp *http.Response) error {
	var body api.ErrorBody
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil && body.Error.Message != "" {
		return errdefs.FromCode(body.Error.Code, body.Error.Message)
	}
	return errdefs.Unavailable("guest agent answered %s", resp.Status)
}

// Ping asks the agent who it is: its build and protocol version.
func (c *Client) Ping(ctx context.Context) (proto.Info, error) {
	var info proto.Info
	err := c.call(ctx, request{route: proto.Ping}, &info)
	return info, err
}

// Exec runs req to its end and returns its collected output.
func (c *Client) Exec(ctx context.Context, req *api.ExecRequest) (*api.ExecResult, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var res api.ExecResult
	if err := c.call(ctx, request{route: proto.Exec, body: body, ctype: "application/json"}, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// ReadFile returns the contents of the regular file at path, at most max
// bytes of it (0: no cap; more is an error). A missing file is
// errdefs.NotFound.
func (c *Client) ReadFile(ctx context.Context, path string, max int64) ([]byte, error) {
	resp, err := c.do(ctx, request{route: proto.FileGet, query: url.Values{"path": {path}}})
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	r := io.Reader(resp.Body)
	if max > 0 {
		r = io.LimitReader(resp.Body, max+1)
	}
	b, err := io.ReadAll(r)
	if err != nil {
		return nil, errdefs.Unavailable("guest agent: reading %s: %v", path, err)
	}
	if max > 0 && int64(len(b)) > max {
		return nil, errdefs.Invalid("%s is larger than %d bytes", path, max)
	}
	return b, nil
}

// WriteOptions are the optional parameters of WriteFile and PutArchive.
type WriteOptions struct {
	// Mode is the new file's permission bits ("0644"); "" is the agent's
	// default.
	Mode string
	// User owns what is written; "" is the sandbox's default user.
	User string
}

// WriteFile writes body to the file at path (its parents are created).
func (c *Client) WriteFile(ctx context.Context, path string, body io.Reader, o WriteOptions) error {
	q := url.Values{"path": {path}}
	if o.Mode != "" {
		q.Set("mode", o.Mode)
	}
	if o.User != "" {
		q.Set("user", o.User)
	}
	return c.call(ctx, request{route: proto.FilePut, query: q, body: body}, nil)
}

// DeleteFile removes the file at path; a missing one is errdefs.NotFound.
func (c *Client) DeleteFile(ctx context.Context, path string) error {
	return c.call(ctx, request{route: proto.FileDelete, query: url.Values{"path": {path}}}, nil)
}

// PutArchive extracts the tar stream r under dir, owned by o.User.
func (c *Client) PutArchive(ctx context.Context, dir string, r io.Reader, o WriteOptions) error {
	q := url.Values{"path": {dir}}
	if o.User != "" {
		q.Set("user", o.User)
	}
	return c.call(ctx, request{route: proto.ArchivePut, query: q, body: r, ctype: "application/x-tar"}, nil)
}

// StartProcess starts a background process.
func (c *Client) StartProcess(ctx context.Context, req api.StartProcessRequest) (*api.Process, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var p api.Process
	if err := c.call(ctx, request{route: proto.ProcessStart, body: body, ctype: "application/json"}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// Process returns background process ref (a pid or a tag).
func (c *Client) Process(ctx context.Context, ref string) (*api.Process, error) {
	var p api.Process
	if err := c.call(ctx, request{route: proto.ProcessGet, args: []string{url.PathEscape(ref)}}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ProcessOutput returns what background process ref's output buffers
// hold.
func (c *Client) ProcessOutput(ctx context.Context, ref string) (*api.ProcessOutput, error) {
	var o api.ProcessOutput
	if err := c.call(ctx, request{route: proto.ProcessOutput, args: []string{url.PathEscape(ref)}}, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// FollowProcess follows background process ref's output stream to its
// exit, handing out each chunk (stream is api.EventStdout or
// api.EventStderr), and returns its exit code (-1 for none, a signal).
func (c *Client) FollowProcess(ctx context.Context, ref string, out func(stream string, data []byte)) (int, error) {
	resp, err := c.do(ctx, request{route: proto.ProcessStream, args: []string{url.PathEscape(ref)}})
	if err != nil {
		return -1, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		var ev api.ExecEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return -1, fmt.Errorf("reading the process's output stream: %w", err)
		}
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			if out != nil {
				out(ev.Type, ev.Data)
			}
		case api.EventExit:
			code := -1
			if ev.ExitCode != nil {
				code = *ev.ExitCode
			}
			return code, nil
		case api.EventError:
			if ev.Error != nil {
				return -1, errdefs.FromCode(ev.Error.Code, ev.Error.Message)
			}
			return -1, fmt.Errorf("the process's stream failed")
		}
	}
	if err := sc.Err(); err != nil {
		return -1, fmt.Errorf("reading the process's output stream: %w", err)
	}
	return -1, fmt.Errorf("the process's output stream ended before its exit")
}

// RunProcess starts req and follows its output to the exit (StartProcess,
// then FollowProcess).
func (c *Client) RunProcess(ctx context.Context, req api.StartProcessRequest, out func(stream string, data []byte)) (int, error) {
	p, err := c.StartProcess(ctx, req)
	if err != nil {
		return -1, err
	}
	return c.FollowProcess(ctx, strconv.Itoa(p.Pid), out)
}

// SetEnv replaces the default environment of the agent's later execs.
func (c *Client) SetEnv(ctx context.Context, env []string) error {
	body, err := jsonBody(proto.GuestEnv{Env: env})
	if err != nil {
		return err
	}
	return c.call(ctx, request{route: proto.SetEnv, body: body, ctype: "application/json"}, nil)
}

// CreateCodeContext starts a code context (a kernel) in the sandbox.
func (c *Client) CreateCodeContext(ctx context.Context, req api.CreateCodeContextRequest) (*api.CodeContext, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out api.CodeContext
	if err := c.call(ctx, request{route: proto.CodeContextCreate, body: body, ctype: "application/json"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// StartDesktop starts the sandbox's display (api.StartDesktopRequest's
// defaults for zero fields) and returns its state.
func (c *Client) StartDesktop(ctx context.Context, req api.StartDesktopRequest) (*api.Desktop, error) {
	body, err := jsonBody(req)
	if err != nil {
		return nil, err
	}
	var out api.Desktop
	if err := c.call(ctx, request{route: proto.DesktopStart, body: body, ctype: "application/json"}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// Checkpoint asks a gvisor sandbox's agent to close its channel for a
// checkpoint; it answers first.
func (c *Client) Checkpoint(ctx context.Context) error {
	return c.call(ctx, request{route: proto.Checkpoint}, nil)
}

// SetEnvOn is SetEnv on a connection the caller dialed, written without
// a transport (a warm pool claim is one request on a fresh connection);
// the connection is left to the caller to close. Without a deadline in
// ctx the exchange gets 10 s.
func SetEnvOn(ctx context.Context, c net.Conn, env []string) error {
	body, err := json.Marshal(proto.GuestEnv{Env: env})
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	} else {
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	}
	req, err := http.NewRequestWithContext(ctx, proto.SetEnv.Method, proto.SetEnv.URL(), bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Close = true
	if err := req.Write(c); err != nil {
		return err
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return fmt.Errorf("guest agent answered %s (an agent older than the env route?)", resp.Status)
	}
	return nil
}

// DialPortOn turns c, a fresh connection to the agent, into a TCP tunnel
// to 127.0.0.1:port inside the sandbox (proto.Dial). It returns the
// reader to read the tunnel from (it may hold bytes already read past the
// agent's answer); on error c is left to the caller to close. The caller
// sets c's deadline for the exchange.
func DialPortOn(c net.Conn, port int) (*bufio.Reader, error) {
	path := proto.Dial.URL(strconv.Itoa(port))[len("http://guest"):]
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: guest\r\nConnection: Upgrade\r\nUpgrade: %s\r\n\r\n", path, proto.DialProtocol); err != nil {
		return nil, unreachableError{errdefs.Unavailable("guest agent: %v", err)}
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		return nil, unreachableError{errdefs.Unavailable("guest agent: %v", err)}
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		var body api.ErrorBody
		if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&body); err == nil && body.Error.Message != "" {
			return nil, errdefs.FromCode(body.Error.Code, body.Error.Message)
		}
		return nil, errdefs.Unavailable("guest agent answered %s to a port dial", resp.Status)
	}
	return br, nil
}
