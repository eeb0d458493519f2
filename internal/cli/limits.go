package cli

import "github.com/spf13/cobra"

// setLimitsOnly is `agentbox egress ID --max-connections N --bandwidth M`
// without policy flags: the policy stays, the limits change.
func setLimitsOnly(c *cobra.Command, g *globals, id string, f *netFlags) error {
	cl, err := g.client()
	if err != nil {
		return err
	}
	sb, err := cl.SetNetworkLimits(c.Context(), id, f.maxConns, f.bandwidth)
	if err != nil {
		return err
	}
	return printJSON(c.OutOrStdout(), sb)
}
