package client

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Exec runs a command and returns when it has ended, with its output
// buffered (capped by req.MaxOutputBytes, 16 MiB by default). A command
// that ran and failed is not an error: look at the result's ExitCode,
// Signal and TimedOut. Use DecodeOutput for the output's bytes.
func (c *Client) Exec(ctx context.Context, id string, req api.ExecRequest) (*api.ExecResult, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var res api.ExecResult
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/exec"), nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// DecodeOutput returns the bytes of a buffered exec's stdout and stderr,
// undoing the base64 the API uses for output that is not UTF-8.
func DecodeOutput(res *api.ExecResult) (stdout, stderr []byte, err error) {
	if res.Encoding != "base64" {
		return []byte(res.Stdout), []byte(res.Stderr), nil
	}
	if stdout, err = base64.StdEncoding.DecodeString(res.Stdout); err != nil {
		return nil, nil, fmt.Errorf("decoding stdout: %w", err)
	}
	if stderr, err = base64.StdEncoding.DecodeString(res.Stderr); err != nil {
		return nil, nil, fmt.Errorf("decoding stderr: %w", err)
	}
	return stdout, stderr, nil
}

// stdinChunk is the most stdin bytes sent in one StdinFrame.
const stdinChunk = 32 << 10

// ExecStream runs a command and streams its output into stdout and stderr
// (either may be nil to drop it) as it comes. When stdin is not nil it is
// forwarded to the command while the command runs, and its EOF closes the
// command's stdin. ExecStream returns the exit event when the command has
// ended; a command that ran and failed is not an error.
//
// The request travels as NDJSON: the ExecRequest line, then StdinFrame
// lines, over the same HTTP/1.1 request whose response carries the
// ExecEvent lines (full duplex). If stdin blocks in Read after the command
// has ended, the goroutine forwarding it stays blocked until that Read
// returns; ExecStream itself does not wait for it.
func (c *Client) ExecStream(ctx context.Context, id string, req api.ExecRequest, stdin io.Reader, stdout, stderr io.Writer) (*api.ExecEvent, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	req.StdinStream = stdin != nil
	line, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("encoding exec request: %w", err)
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pr, pw := io.Pipe()
	// Closing pr stops the writer below at its next write, whatever the
	// transport is doing with the body.
	defer pr.Close()
	go pumpStdin(pw, line, stdin)

	hreq, err := c.newRequest(ctx, "POST", sandboxPath(id, "/exec/stream"), nil, pr)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/x-ndjson")
	// Binary frames where the sandbox's agent has them (no base64 on
	// either end), NDJSON from one that predates them.
	if c.ndjson {
		hreq.Header.Set("Accept", "application/x-ndjson")
	} else {
		hreq.Header.Set("Accept", api.FramesContentType+", application/x-ndjson;q=0.9")
	}
	resp, err := c.send(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()

	events := api.NewStreamReader(resp.Header.Get("Content-Type"), resp.Body)
	if fr, ok := events.(*api.FrameReader); ok {
		fr.Reuse = true // each output event is written out before the next
	}
	for {
		var ev api.ExecEvent
		if err := events.Next(&ev); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return nil, ctxErr
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return nil, errdefs.Unavailable("the exec stream ended before the command's exit; the daemon or the sandbox may have gone away")
			}
			return nil, errdefs.Unavailable("reading the exec stream: %v", err)
		}
		switch ev.Type {
		case api.EventStdout:
			if _, err := stdout.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("writing the command's stdout: %w", err)
			}
		case api.EventStderr:
			if _, err := stderr.Write(ev.Data); err != nil {
				return nil, fmt.Errorf("writing the command's stderr: %w", err)
			}
		case api.EventExit:
			return &ev, nil
		case api.EventError:
			if ev.Error == nil {
				return nil, errdefs.New(errdefs.ErrInternal, "the exec stream reported an error without details")
			}
			return nil, errdefs.FromCode(ev.Error.Code, ev.Error.Message)
		}
		// start, keepalive and unknown event types carry nothing to do.
	}
}

// pumpStdin writes the request line, then stdin as StdinFrame lines ending
// with an EOF frame, then closes the body.
func pumpStdin(pw *io.PipeWriter, line []byte, stdin io.Reader) {
	if _, err := pw.Write(append(line, '\n')); err != nil {
		pw.CloseWithError(err)
		return
	}
	if stdin != nil {
		enc := json.NewEncoder(pw)
		buf := make([]byte, stdinChunk)
		for {
			n, rerr := stdin.Read(buf)
			if n > 0 {
				if err := enc.Encode(api.StdinFrame{Data: buf[:n]}); err != nil {
					pw.CloseWithError(err)
					return
				}
			}
			if rerr != nil {
				// A failing stdin ends the command's input like EOF does.
				if err := enc.Encode(api.StdinFrame{EOF: true}); err != nil {
					pw.CloseWithError(err)
					return
				}
				break
			}
		}
	}
	pw.Close()
}
