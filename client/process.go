package client

import (
	"context"
	"errors"
	"io"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// StartProcess starts a background process: it runs in the sandbox
// independent of this client, its output kept in ring buffers that
// ProcessOutput and StreamProcess read by offset.
func (c *Client) StartProcess(ctx context.Context, id string, req api.StartProcessRequest) (*api.Process, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var p api.Process
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/processes"), nil, req, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ListProcesses lists the sandbox's background processes.
func (c *Client) ListProcesses(ctx context.Context, id string) ([]api.Process, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var l api.ProcessList
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/processes"), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Processes, nil
}

func procPath(id, ref, rest string) string {
	return sandboxPath(id, "/processes/"+url.PathEscape(ref)+rest)
}

// GetProcess returns a background process by pid or tag.
func (c *Client) GetProcess(ctx context.Context, id, ref string) (*api.Process, error) {
	var p api.Process
	if err := c.doJSON(ctx, "GET", procPath(id, ref, ""), nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// ProcessOutput returns a background process's output from the given
// offsets on; pass the returned offsets to the next call to read on.
func (c *Client) ProcessOutput(ctx context.Context, id, ref string, stdoutOffset, stderrOffset int64) (*api.ProcessOutput, error) {
	q := url.Values{"stdout_offset": {strconv.FormatInt(stdoutOffset, 10)}, "stderr_offset": {strconv.FormatInt(stderrOffset, 10)}}
	var o api.ProcessOutput
	if err := c.doJSON(ctx, "GET", procPath(id, ref, "/output"), q, nil, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// ProcessOutputChunks is ProcessOutput with Chunks: when each part of
// the output was written, both streams in the order the process wrote
// them. A daemon older than chunks answers none.
func (c *Client) ProcessOutputChunks(ctx context.Context, id, ref string, stdoutOffset, stderrOffset int64) (*api.ProcessOutput, error) {
	q := url.Values{"stdout_offset": {strconv.FormatInt(stdoutOffset, 10)}, "stderr_offset": {strconv.FormatInt(stderrOffset, 10)}, "chunks": {"true"}}
	var o api.ProcessOutput
	if err := c.doJSON(ctx, "GET", procPath(id, ref, "/output"), q, nil, &o); err != nil {
		return nil, err
	}
	return &o, nil
}

// StreamOptions say where StreamProcess starts: at the offsets, or at the
// current end of both streams with FromNow. With Chunks, each event is
// one chunk of output with its Time, both streams in the order written.
type StreamOptions struct {
	StdoutOffset, StderrOffset int64
	FromNow                    bool
	Chunks                     bool
}

// StreamProcess follows a background process's output, calling fn for
// every stdout and stderr event (each carries its Offset), until the
// process ends: it then returns the exit event. Cancel ctx to detach; the
// process keeps running. fn's error stops the stream and is returned.
func (c *Client) StreamProcess(ctx context.Context, id, ref string, opts StreamOptions, fn func(*api.ExecEvent) error) (*api.ExecEvent, error) {
	q := url.Values{"stdout_offset": {strconv.FormatInt(opts.StdoutOffset, 10)}, "stderr_offset": {strconv.FormatInt(opts.StderrOffset, 10)}}
	if opts.FromNow {
		q = url.Values{"from": {"now"}}
	}
	if opts.Chunks {
		q.Set("chunks", "true")
	}
	req, err := c.newRequest(ctx, "GET", procPath(id, ref, "/stream"), q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	events := api.NewEventReader(resp.Body)
	for {
		var ev api.ExecEvent
		if err := events.Next(&ev); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errdefs.Unavailable("the process stream ended before the process's exit; reattach from the last offset")
			}
			return nil, errdefs.Unavailable("reading the process stream: %v", err)
		}
		switch ev.Type {
		case api.EventStdout, api.EventStderr:
			if err := fn(&ev); err != nil {
				return nil, err
			}
		case api.EventExit:
			return &ev, nil
		case api.EventError:
			if ev.Error != nil {
				return nil, errdefs.FromCode(ev.Error.Code, ev.Error.Message)
			}
		}
	}
}

// WaitProcess waits for a background process to end; timeoutMs 0 waits
// without limit. A process still running at the timeout is a
// deadline-exceeded error.
func (c *Client) WaitProcess(ctx context.Context, id, ref string, timeoutMs int64) (*api.Process, error) {
	q := url.Values{"timeout_ms": {strconv.FormatInt(timeoutMs, 10)}}
	var p api.Process
	if err := c.doJSON(ctx, "POST", procPath(id, ref, "/wait"), q, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// WriteStdin appends data to a background process's stdin; eof closes it
// afterwards.
func (c *Client) WriteStdin(ctx context.Context, id, ref string, data io.Reader, eof bool) error {
	var q url.Values
	if eof {
		q = url.Values{"eof": {"true"}}
	}
	req, err := c.newRequest(ctx, "POST", procPath(id, ref, "/stdin"), q, data)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	return nil
}

// SignalProcess sends sig (a name like "SIGINT", or a number as a
// string) to a background process, or with tree to its whole tree.
func (c *Client) SignalProcess(ctx context.Context, id, ref, sig string, tree bool) error {
	var v any = sig
	if n, err := strconv.Atoi(sig); err == nil {
		v = n
	}
	return c.doJSON(ctx, "POST", procPath(id, ref, "/signal"), nil, api.SignalRequest{Signal: v, Tree: tree}, nil)
}

// KillProcess kills a background process's whole tree and forgets it.
func (c *Client) KillProcess(ctx context.Context, id, ref string) error {
	return c.doJSON(ctx, "DELETE", procPath(id, ref, ""), nil, nil, nil)
}
