package client

import (
	"context"
	"net/url"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// PauseSandbox freezes every process of a sandbox.
func (c *Client) PauseSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/pause", nil)
}

// ResumeSandbox thaws a paused sandbox, or starts a stopped one on its
// files (cold).
func (c *Client) ResumeSandbox(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/resume", nil)
}

// ResetSandbox puts a sandbox back to where it started, or onto snapshot
// (an id or name) when not empty, keeping its id.
func (c *Client) ResetSandbox(ctx context.Context, id, snapshot string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/reset", api.ResetRequest{Snapshot: snapshot})
}

// ResetToTemplate puts a sandbox back to its template alone, leaving the
// snapshot it was created from or last reset to; same id.
func (c *Client) ResetToTemplate(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/reset", api.ResetRequest{Template: true})
}

func (c *Client) sandboxAction(ctx context.Context, id, action string, body any) (*api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var sb api.Sandbox
	if err := c.doJSON(ctx, "POST", sandboxPath(id, action), nil, body, &sb); err != nil {
		return nil, err
	}
	return &sb, nil
}

// ForkSandbox creates count children from a sandbox's current files.
func (c *Client) ForkSandbox(ctx context.Context, id string, count int) ([]api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.ForkResponse
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/fork"), nil, api.ForkRequest{Count: count}, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// ForkSandboxWith forks a sandbox as req says: ForkSandbox's count, and
// Spread, through a fleet gateway, to place the children over the fleet's
// nodes (docs/cluster.md); Memory is ForkSandboxWithMemory's.
func (c *Client) ForkSandboxWith(ctx context.Context, id string, req api.ForkRequest) ([]api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.ForkResponse
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/fork"), nil, req, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}

// CreateSnapshot captures a sandbox's files as a snapshot; name may be
// empty.
func (c *Client) CreateSnapshot(ctx context.Context, id, name string) (*api.Snapshot, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var snap api.Snapshot
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/snapshots"), nil, api.CreateSnapshotRequest{Name: name}, &snap); err != nil {
		return nil, err
	}
	return &snap, nil
}

// ListSnapshots lists the snapshots the key can see.
func (c *Client) ListSnapshots(ctx context.Context) ([]api.Snapshot, error) {
	var out api.ListSnapshotsResponse
	if err := c.doJSON(ctx, "GET", "/v1/snapshots", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Snapshots, nil
}

// GetSnapshot returns a snapshot by id or name.
func (c *Client) GetSnapshot(ctx context.Context, ref string) (*api.Snapshot, error) {
	if ref == "" {
		return nil, errdefs.Invalid("a snapshot id or name is required")
	}
	var snap api.Snapshot
	if err := c.doJSON(ctx, "GET", "/v1/snapshots/"+url.PathEscape(ref), nil, nil, &snap); err != nil {
		return nil, err
	}
	return &snap, nil
}

// DeleteSnapshot removes a snapshot; the daemon refuses (failed
// precondition) while a sandbox or snapshot depends on it.
func (c *Client) DeleteSnapshot(ctx context.Context, ref string) error {
	if ref == "" {
		return errdefs.Invalid("a snapshot id or name is required")
	}
	return c.doJSON(ctx, "DELETE", "/v1/snapshots/"+url.PathEscape(ref), nil, nil, nil)
}
