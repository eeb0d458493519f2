package client

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// BuildTemplate builds a new version of template name from a YAML build
// spec. With a tenant's key the template is the tenant's own, within its
// disk quota; with an admin key it is public. buildContext, if not nil,
// is a tar stream (plain or gzip) of the build context directory that
// copy steps read from.
// onEvent, if not nil, receives every progress event (steps, their
// output lines, their ends, and a keepalive after 15 s without another).
// It returns the template (the newest version
// unchanged when nothing changed since the last build), or the error the
// build ended with: a failing step's error names the step, its exit code
// and its last output, and leaves no template version.
func (c *Client) BuildTemplate(ctx context.Context, name string, spec []byte, buildContext io.Reader, onEvent func(api.BuildEvent)) (*api.Template, error) {
	if name == "" {
		return nil, errdefs.Invalid("a template name is required")
	}
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		err := func() error {
			w, err := mw.CreateFormFile("spec", "spec.yaml")
			if err != nil {
				return err
			}
			if _, err := w.Write(spec); err != nil {
				return err
			}
			if buildContext != nil {
				w, err := mw.CreateFormFile("context", "context.tar")
				if err != nil {
					return err
				}
				if _, err := io.Copy(w, buildContext); err != nil {
					return fmt.Errorf("sending the build context: %w", err)
				}
			}
			return mw.Close()
		}()
		pw.CloseWithError(err)
	}()
	req, err := c.newRequest(ctx, "POST", "/v1/templates/build", url.Values{"name": {name}}, pr)
	if err != nil {
		pr.Close()
		return nil, err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.send(req)
	if err != nil {
		pr.CloseWithError(err)
		return nil, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev api.BuildEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("reading the build's progress: %w", err)
		}
		switch ev.Type {
		case api.BuildEventDone:
			if ev.Template == nil {
				return nil, fmt.Errorf("the build ended without a template")
			}
			return ev.Template, nil
		case api.BuildEventError:
			if ev.Error == nil {
				return nil, fmt.Errorf("the build failed")
			}
			return nil, errdefs.FromCode(ev.Error.Code, ev.Error.Message)
		}
		if onEvent != nil {
			onEvent(ev)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading the build's progress: %w", err)
	}
	return nil, errdefs.Unavailable("the daemon closed the build's stream before it ended")
}
