package client

import (
	"context"
	"net/url"
	"sort"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Health reports the daemon's status.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	var h api.Health
	if err := c.doJSON(ctx, "GET", "/v1/health", nil, nil, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// CreateSandbox creates a sandbox and returns once it can run a command.
func (c *Client) CreateSandbox(ctx context.Context, req api.CreateSandboxRequest) (*api.Sandbox, error) {
	var sb api.Sandbox
	if err := c.doJSON(ctx, "POST", "/v1/sandboxes", nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// GetSandbox returns one sandbox.
func (c *Client) GetSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var sb api.Sandbox
	if err := c.doJSON(ctx, "GET", sandboxPath(id, ""), nil, nil, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ListOptions filters ListSandboxes. Empty fields do not filter.
type ListOptions struct {
	State    string            // e.g. api.StateRunning
	Metadata map[string]string // every pair must match
	// Limit and Cursor ask ListSandboxesPage for one page: at most Limit
	// sandboxes (1-1000), after Cursor (a page's NextCursor). ListSandboxes
	// ignores them and returns every sandbox.
	Limit  int
	Cursor string
}

// ListSandboxes lists the sandboxes the key can see.
func (c *Client) ListSandboxes(ctx context.Context, opts ListOptions) ([]api.Sandbox, error) {
	opts.Limit, opts.Cursor = 0, ""
	page, err := c.ListSandboxesPage(ctx, opts)
	if err != nil {
		return nil, err
	}
	return page.Sandboxes, nil
}

// ListSandboxesPage returns one page of the sandboxes the key can see,
// oldest first; its NextCursor, passed as opts.Cursor with the same
// filters and limit, gives the next page ("" on the last).
func (c *Client) ListSandboxesPage(ctx context.Context, opts ListOptions) (*api.ListSandboxesResponse, error) {
	q := url.Values{}
	if opts.Limit != 0 {
		q.Set("limit", strconv.Itoa(opts.Limit))
	}
	if opts.Cursor != "" {
		q.Set("cursor", opts.Cursor)
	}
	if opts.State != "" {
		q.Set("state", opts.State)
	}
	keys := make([]string, 0, len(opts.Metadata))
	for k := range opts.Metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		q.Add("metadata."+k, opts.Metadata[k])
	}
	var out api.ListSandboxesResponse
	if err := c.doJSON(ctx, "GET", "/v1/sandboxes", q, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// UpdateSandbox changes a sandbox's settings.
func (c *Client) UpdateSandbox(ctx context.Context, id string, req api.UpdateSandboxRequest) (*api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var sb api.Sandbox
	if err := c.doJSON(ctx, "PATCH", sandboxPath(id, ""), nil, req, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// NoTTL, passed to SetTTL, removes a sandbox's TTL.
const NoTTL time.Duration = -1

// SetTTL makes the sandbox expire ttl from now (rounded up to a whole
// second); a negative ttl (NoTTL) removes the TTL.
func (c *Client) SetTTL(ctx context.Context, id string, ttl time.Duration) (*api.Sandbox, error) {
	secs := int64(-1)
	if ttl >= 0 {
		secs = int64((ttl + time.Second - 1) / time.Second)
	}
	return c.UpdateSandbox(ctx, id, api.UpdateSandboxRequest{TTLSeconds: &secs})
}

// DestroySandbox destroys a sandbox and everything in it.
func (c *Client) DestroySandbox(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return c.doJSON(ctx, "DELETE", sandboxPath(id, ""), nil, nil, nil)
}

func checkID(id string) error {
	if id == "" {
		return errdefs.Invalid("a sandbox id is required")
	}
	return nil
}

// Info returns what the daemon offers: its isolation tiers and whether
// each runs, the defaults and limits of a create; to admins also where it
// keeps its state and logs.
func (c *Client) Info(ctx context.Context) (*api.Info, error) {
	var out api.Info
	if err := c.doJSON(ctx, "GET", "/v1/info", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
