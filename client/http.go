package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// maxErrorBody bounds how much of an error response is read.
const maxErrorBody = 64 << 10

// newRequest builds a request for path (already escaped) and query.
func (c *Client) newRequest(ctx context.Context, method, path string, query url.Values, body io.Reader) (*http.Request, error) {
	u := c.base + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, fmt.Errorf("building request %s %s: %w", method, path, err)
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}
	req.Header.Set("User-Agent", c.ua)
	req.Header.Set("Accept", "application/json")
	return req, nil
}

// send performs req and turns a non-2xx answer into a typed error. On
// success the caller owns resp.Body.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.hc.Do(req)
	if err != nil {
		if ctxErr := req.Context().Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, &errdefs.Error{
			Class:   errdefs.ErrUnavailable,
			Message: fmt.Sprintf("cannot reach the agentbox daemon at %s (%v); is `agentbox serve` running? Set %s to its address", c.host, unwrapURLError(err), EnvHost),
		}
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer resp.Body.Close()
	return nil, c.decodeError(resp)
}

// decodeError reads an api.ErrorBody from resp and returns the typed error
// it names; bodies that are not ErrorBody are classed by status.
func (c *Client) decodeError(resp *http.Response) error {
	b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	var eb api.ErrorBody
	var err error
	if json.Unmarshal(b, &eb) == nil && eb.Error.Code != "" {
		err = errdefs.FromCode(eb.Error.Code, eb.Error.Message)
	} else {
		msg := strings.TrimSpace(string(b))
		if msg == "" {
			msg = http.StatusText(resp.StatusCode)
		}
		err = &errdefs.Error{Class: classForStatus(resp.StatusCode), Message: fmt.Sprintf("agentbox daemon answered %d: %s", resp.StatusCode, msg)}
	}
	if resp.StatusCode == http.StatusUnauthorized && c.apiKey == "" {
		var e *errdefs.Error
		if errors.As(err, &e) {
			return &errdefs.Error{Class: e.Class, Message: e.Message + " (no API key is set: set " + EnvAPIKey + ")"}
		}
	}
	return err
}

// classForStatus maps an HTTP status to an error class, for answers that
// do not carry an ErrorBody (a proxy in between, say).
func classForStatus(status int) error {
	switch status {
	case http.StatusNotFound:
		return errdefs.ErrNotFound
	case http.StatusConflict:
		return errdefs.ErrFailedPrecondition
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return errdefs.ErrInvalidArgument
	case http.StatusTooManyRequests:
		return errdefs.ErrResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway:
		return errdefs.ErrUnavailable
	case http.StatusForbidden:
		return errdefs.ErrPermissionDenied
	case http.StatusUnauthorized:
		return errdefs.ErrUnauthenticated
	case http.StatusGatewayTimeout:
		return errdefs.ErrDeadlineExceeded
	}
	return errdefs.ErrInternal
}

func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// doJSON sends in (when not nil) as JSON and decodes the answer into out
// (when not nil).
func (c *Client) doJSON(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encoding request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := c.newRequest(ctx, method, path, query, body)
	if err != nil {
		return err
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		return nil
	}
	if err := decodeJSON(resp.Body, out); err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return ctxErr
		}
		return &errdefs.Error{Class: errdefs.ErrInternal, Message: fmt.Sprintf("decoding the answer to %s %s: %v", method, path, err)}
	}
	return nil
}

// sandboxPath returns the escaped path of a sandbox route.
func sandboxPath(id string, rest string) string {
	return "/v1/sandboxes/" + url.PathEscape(id) + rest
}

// decodeJSON decodes one JSON value; an empty body leaves out unchanged.
func decodeJSON(r io.Reader, out any) error {
	err := json.NewDecoder(r).Decode(out)
	if errors.Is(err, io.EOF) {
		return nil
	}
	return err
}
