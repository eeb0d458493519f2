package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// CreatePTY starts a program in a new pseudo-terminal in the sandbox;
// attach to it with AttachPTY.
func (c *Client) CreatePTY(ctx context.Context, id string, req api.CreatePTYRequest) (*api.PTYSession, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var s api.PTYSession
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/pty"), nil, req, &s); err != nil {
		return nil, err
	}
	return &s, nil
}

// ListPTYs lists the sandbox's PTY sessions.
func (c *Client) ListPTYs(ctx context.Context, id string) ([]api.PTYSession, error) {
	var l api.PTYList
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/pty"), nil, nil, &l); err != nil {
		return nil, err
	}
	return l.Sessions, nil
}

// ResizePTY sets a PTY's size.
func (c *Client) ResizePTY(ctx context.Context, id string, pid, cols, rows int) error {
	return c.doJSON(ctx, "POST", sandboxPath(id, "/pty/"+strconv.Itoa(pid)+"/resize"), nil, api.PTYSize{Cols: cols, Rows: rows}, nil)
}

// KillPTY kills a PTY session's whole tree.
func (c *Client) KillPTY(ctx context.Context, id string, pid int) error {
	return c.doJSON(ctx, "DELETE", sandboxPath(id, "/pty/"+strconv.Itoa(pid)), nil, nil, nil)
}

// PTYConn is an attached PTY: Read returns terminal output (first the
// screen's recent output, replayed), Write types into the terminal.
// Read returns io.EOF once the program has ended; ExitCode then says how.
// Closing detaches; the program keeps running.
type PTYConn struct {
	ws  *websocket.Conn
	ctx context.Context

	// mu guards pending, exit.
	mu      sync.Mutex
	pending []byte
	exit    *api.PTYControl
}

// AttachPTY attaches to a PTY session over a WebSocket. ctx bounds the
// whole attachment.
func (c *Client) AttachPTY(ctx context.Context, id string, pid int) (*PTYConn, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	u := "ws" + strings.TrimPrefix(c.base, "http") + sandboxPath(id, "/pty/"+strconv.Itoa(pid)+"/ws")
	h := http.Header{}
	if c.apiKey != "" {
		h.Set("Authorization", "Bearer "+c.apiKey)
	}
	h.Set("User-Agent", c.ua)
	ws, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: c.hc, HTTPHeader: h})
	if err != nil {
		if resp != nil && resp.StatusCode >= 400 {
			return nil, c.decodeError(resp)
		}
		return nil, errdefs.Unavailable("attaching to PTY %d: %v", pid, err)
	}
	ws.SetReadLimit(4 << 20)
	return &PTYConn{ws: ws, ctx: ctx}, nil
}

// Read reads terminal output.
func (p *PTYConn) Read(b []byte) (int, error) {
	p.mu.Lock()
	if len(p.pending) > 0 {
		n := copy(b, p.pending)
		p.pending = p.pending[n:]
		p.mu.Unlock()
		return n, nil
	}
	p.mu.Unlock()
	for {
		typ, data, err := p.ws.Read(p.ctx)
		if err != nil {
			if p.ExitCode() != nil || websocket.CloseStatus(err) == websocket.StatusNormalClosure {
				return 0, io.EOF
			}
			return 0, err
		}
		if typ == websocket.MessageText {
			var ctl api.PTYControl
			if json.Unmarshal(data, &ctl) == nil && ctl.Type == api.PTYExit {
				p.mu.Lock()
				p.exit = &ctl
				p.mu.Unlock()
			}
			continue
		}
		n := copy(b, data)
		if n < len(data) {
			p.mu.Lock()
			p.pending = append(p.pending, data[n:]...)
			p.mu.Unlock()
		}
		return n, nil
	}
}

// Write types b into the terminal.
func (p *PTYConn) Write(b []byte) (int, error) {
	if err := p.ws.Write(p.ctx, websocket.MessageBinary, b); err != nil {
		return 0, err
	}
	return len(b), nil
}

// Resize sets the terminal's size.
func (p *PTYConn) Resize(cols, rows int) error {
	msg, _ := json.Marshal(api.PTYControl{Type: api.PTYResize, Cols: cols, Rows: rows})
	return p.ws.Write(p.ctx, websocket.MessageText, msg)
}

// ExitCode is the program's exit code once Read returned io.EOF; nil
// before.
func (p *PTYConn) ExitCode() *int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exit == nil {
		return nil
	}
	return p.exit.ExitCode
}

// Close detaches.
func (p *PTYConn) Close() error {
	return p.ws.Close(websocket.StatusNormalClosure, "detached")
}
