package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// RunCode runs a cell in a code context (req.Context, or the default
// context of req.Language, python when both are empty) and returns the
// whole execution. The run streams: when on is not nil it is called with
// each event as it arrives (stdout, stderr, result, error, ...), in order.
// An exception in the code, a timeout or a kernel death is not an error:
// look at the Execution's Error, Status and Restarted.
func (c *Client) RunCode(ctx context.Context, id string, req api.RunCodeRequest, on func(api.CodeEvent)) (*api.Execution, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding run request: %w", err)
	}
	hreq, err := c.newRequest(ctx, "POST", sandboxPath(id, "/code/run/stream"), nil, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hreq.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	ex := &api.Execution{Results: []api.CodeResult{}, Logs: api.CodeLogs{Stdout: []string{}, Stderr: []string{}}}
	dec := json.NewDecoder(resp.Body)
	for {
		var ev api.CodeEvent
		if err := dec.Decode(&ev); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errdefs.Unavailable("the code stream ended before end_of_execution; the daemon or the sandbox may have gone away")
			}
			return nil, errdefs.Unavailable("reading the code stream: %v", err)
		}
		ex.Add(ev)
		if on != nil && ev.Type != api.CodeEventKeepalive {
			on(ev)
		}
		if ev.Type == api.CodeEventEnd {
			return ex, nil
		}
	}
}

// CreateCodeContext starts a code context (one kernel with its own
// state) and returns it once the kernel is ready.
func (c *Client) CreateCodeContext(ctx context.Context, id string, req api.CreateCodeContextRequest) (*api.CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var cc api.CodeContext
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/code/contexts"), nil, req, &cc); err != nil {
		return nil, err
	}
	return &cc, nil
}

// ListCodeContexts returns a sandbox's code contexts, oldest first.
func (c *Client) ListCodeContexts(ctx context.Context, id string) ([]api.CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var l api.CodeContextList
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/code/contexts"), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Contexts, nil
}

func codePath(id, ctxID, rest string) string {
	return sandboxPath(id, "/code/contexts/"+url.PathEscape(ctxID)+rest)
}

// GetCodeContext returns one code context.
func (c *Client) GetCodeContext(ctx context.Context, id, ctxID string) (*api.CodeContext, error) {
	return c.codeContextCall(ctx, "GET", id, ctxID, "")
}

// RemoveCodeContext shuts a context's kernel down and forgets it.
func (c *Client) RemoveCodeContext(ctx context.Context, id, ctxID string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return c.doJSON(ctx, "DELETE", codePath(id, ctxID, ""), nil, nil, nil)
}

// RestartCodeContext replaces a context's kernel with a fresh one: its
// state is lost.
func (c *Client) RestartCodeContext(ctx context.Context, id, ctxID string) (*api.CodeContext, error) {
	return c.codeContextCall(ctx, "POST", id, ctxID, "/restart")
}

// InterruptCodeContext interrupts a context's running cell (its state is
// kept) and returns once the cell ended or after 5 s.
func (c *Client) InterruptCodeContext(ctx context.Context, id, ctxID string) (*api.CodeContext, error) {
	return c.codeContextCall(ctx, "POST", id, ctxID, "/interrupt")
}

func (c *Client) codeContextCall(ctx context.Context, method, id, ctxID, rest string) (*api.CodeContext, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var cc api.CodeContext
	if err := c.doJSON(ctx, method, codePath(id, ctxID, rest), nil, nil, &cc); err != nil {
		return nil, err
	}
	return &cc, nil
}
