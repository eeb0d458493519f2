package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/api"
)

// SandboxMetrics returns sandbox id's resource use: a sample every few
// seconds over the last hour, oldest first (docs/observability.md).
func (c *Client) SandboxMetrics(ctx context.Context, id string) (*api.SandboxMetrics, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.SandboxMetrics
	if err := c.doJSON(ctx, "GET", sandboxPath(id, "/metrics"), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// EventFilter selects events; empty fields select everything the key may
// see (a tenant's key: its own tenant's).
type EventFilter struct {
	Types   []string // e.g. "created", "destroyed"
	Sandbox string
	Tenant  string // admin keys only
}

// EventStream is an open GET /v1/events. Next blocks for the next event;
// Close ends the stream.
type EventStream struct {
	body io.ReadCloser
	sc   *bufio.Scanner
	// Dropped counts events the daemon dropped because this reader was
	// too slow.
	Dropped uint64
}

// Events subscribes to the lifecycle events f selects. The stream holds a
// connection until Close or ctx ends.
func (c *Client) Events(ctx context.Context, f EventFilter) (*EventStream, error) {
	q := url.Values{}
	if len(f.Types) > 0 {
		q.Set("type", strings.Join(f.Types, ","))
	}
	if f.Sandbox != "" {
		q.Set("sandbox", f.Sandbox)
	}
	if f.Tenant != "" {
		q.Set("tenant", f.Tenant)
	}
	req, err := c.newRequest(ctx, "GET", "/v1/events", q, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	resp, err := c.send(req)
	if err != nil {
		return nil, err
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	s := &EventStream{body: resp.Body, sc: sc}
	return s, nil
}

// Next returns the next event; io.EOF when the daemon ended the stream.
func (s *EventStream) Next() (api.Event, error) {
	var typ string
	var data []string
	for s.sc.Scan() {
		line := s.sc.Text()
		switch {
		case line == "":
			if len(data) == 0 {
				typ = ""
				continue
			}
			payload := strings.Join(data, "\n")
			if typ == "dropped" {
				var d struct{ Dropped uint64 }
				if json.Unmarshal([]byte(payload), &d) == nil {
					s.Dropped += d.Dropped
				}
				typ, data = "", nil
				continue
			}
			var e api.Event
			if err := json.Unmarshal([]byte(payload), &e); err != nil {
				return api.Event{}, fmt.Errorf("reading event: %w", err)
			}
			return e, nil
		case strings.HasPrefix(line, ":"): // comment
		case strings.HasPrefix(line, "event:"):
			typ = strings.TrimSpace(strings.TrimPrefix(line, "event:"))
		case strings.HasPrefix(line, "data:"):
			data = append(data, strings.TrimPrefix(strings.TrimPrefix(line, "data:"), " "))
		}
	}
	if err := s.sc.Err(); err != nil {
		return api.Event{}, err
	}
	return api.Event{}, io.EOF
}

// Close ends the stream.
func (s *EventStream) Close() error { return s.body.Close() }
