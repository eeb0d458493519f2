package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// WatchFiles streams file events under path (a directory or a file; with
// recursive, its whole tree) to fn until ctx ends or fn returns an error.
// Keepalive events are not passed on; ready, when not nil, is called once
// the watch is in place.
func (c *Client) WatchFiles(ctx context.Context, id, path string, recursive bool, ready func(), fn func(api.WatchEvent) error) error {
	if err := checkID(id); err != nil {
		return err
	}
	q := url.Values{"path": {path}}
	if recursive {
		q.Set("recursive", "true")
	}
	req, err := c.newRequest(ctx, "GET", sandboxPath(id, "/files/watch"), q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	first := true
	for {
		var ev api.WatchEvent
		if err := dec.Decode(&ev); err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return errdefs.Unavailable("the watch stream ended; the sandbox may have gone away")
			}
			return errdefs.Unavailable("reading the watch stream: %v", err)
		}
		if first && ready != nil {
			ready()
		}
		first = false
		if ev.Type == api.WatchKeepalive {
			continue
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
}
