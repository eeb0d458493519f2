package client

import (
	"context"

	"github.com/agentbox/agentbox/api"
)

// Pools lists the daemon's warm pools: per template, tier, limits and
// egress, how many sandboxes are ready and how many creates each served.
func (c *Client) Pools(ctx context.Context) ([]api.PoolStatus, error) {
	var out api.ListPoolsResponse
	if err := c.doJSON(ctx, "GET", "/v1/pools", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Pools, nil
}
