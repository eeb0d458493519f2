package client

import (
	"context"

	"github.com/agentbox/agentbox/api"
)

// FleetNodes returns a fleet gateway's membership table (GET
// /v1/fleet/nodes, an admin key): each node's id, URL, whether it is
// available, its last error and poll, the creates in flight to it and
// its last status (docs/cluster.md). A node answers ErrUnimplemented.
func (c *Client) FleetNodes(ctx context.Context) ([]api.FleetNode, error) {
	var out api.ListFleetNodesResponse
	if err := c.doJSON(ctx, "GET", "/v1/fleet/nodes", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Nodes, nil
}

// NodeStatus returns a node's status as a fleet gateway polls it (GET
// /v1/node, an admin key): node_id, tiers, sandboxes, CPUs, load, memory
// and ready templates.
func (c *Client) NodeStatus(ctx context.Context) (*api.NodeStatus, error) {
	var out api.NodeStatus
	if err := c.doJSON(ctx, "GET", "/v1/node", nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}
