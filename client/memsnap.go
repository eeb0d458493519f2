package client

import (
	"context"

	"github.com/agentbox/agentbox/api"
)

// Memory snapshots (gvisor tier): pause to disk, snapshots with memory and
// fork with memory. Other tiers answer errdefs.ErrFailedPrecondition.

// PauseSandboxToDisk checkpoints a sandbox's processes and memory to disk
// and stops it: it uses no host memory and survives daemon restarts and
// host reboots. ResumeSandbox restores it where it was.
func (c *Client) PauseSandboxToDisk(ctx context.Context, id string) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/pause", api.PauseRequest{ToDisk: true})
}

// CreateMemorySnapshot captures a sandbox's files, processes and memory;
// a sandbox created from it goes on running those processes. name may be
// empty.
func (c *Client) CreateMemorySnapshot(ctx context.Context, id, name string) (*api.Snapshot, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var snap api.Snapshot
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/snapshots"), nil, api.CreateSnapshotRequest{Name: name, Memory: true}, &snap); err != nil {
		return nil, err
	}
	return &snap, nil
}

// ForkSandboxWithMemory creates count children that each go on running
// the parent's processes, memory included; the parent keeps running.
func (c *Client) ForkSandboxWithMemory(ctx context.Context, id string, count int) ([]api.Sandbox, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	var out api.ForkResponse
	if err := c.doJSON(ctx, "POST", sandboxPath(id, "/fork"), nil, api.ForkRequest{Count: count, Memory: true}, &out); err != nil {
		return nil, err
	}
	return out.Sandboxes, nil
}
