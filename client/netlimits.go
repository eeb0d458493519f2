package client

import (
	"context"

	"github.com/agentbox/agentbox/api"
)

// SetNetwork replaces sandbox id's egress policy and limits while it runs:
// n's Egress, Allow, Deny, MaxConnections and BandwidthMbit (a limit of 0
// keeps the sandbox's, -1 removes it). See docs/network.md.
func (c *Client) SetNetwork(ctx context.Context, id string, n api.Network) (*api.Sandbox, error) {
	return c.sandboxAction(ctx, id, "/egress", api.Network{
		Egress: n.Egress, Allow: n.Allow, Deny: n.Deny,
		MaxConnections: n.MaxConnections, BandwidthMbit: n.BandwidthMbit,
	})
}

// SetNetworkLimits changes only sandbox id's connection and bandwidth
// limits (0 keeps one, -1 removes it), keeping its egress policy: it
// reads the policy and sends it back with the new limits.
func (c *Client) SetNetworkLimits(ctx context.Context, id string, maxConnections, bandwidthMbit int) (*api.Sandbox, error) {
	sb, err := c.GetSandbox(ctx, id)
	if err != nil {
		return nil, err
	}
	n := api.Network{Egress: api.EgressNone}
	if sb.Network != nil {
		n = *sb.Network
	}
	n.MaxConnections, n.BandwidthMbit = maxConnections, bandwidthMbit
	return c.SetNetwork(ctx, id, n)
}
