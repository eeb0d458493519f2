package cli

import (
	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

func newEgressCommand(g *globals) *cobra.Command {
	var f netFlags
	cmd := &cobra.Command{
		Use:   "egress ID",
		Short: "Change a running sandbox's egress policy",
		Long: `Replace a sandbox's egress policy: --egress none|internet|custom with
--allow and --deny rules: domains (example.org, *.example.org: the most
specific domain rule wins), CIDRs, addresses, :port, CIDR:port (deny wins
over allow for addresses). Connections already open keep going; new ones
see the new policy at once. With only --allow given, the policy is custom.
'agentbox egress log ID' shows what the policy allowed and denied.`,
		Example: `  agentbox egress "$id" --egress internet --deny 203.0.113.0/24
  agentbox egress "$id" --allow example.com --allow '*.example.org' --deny 10.0.0.0/8
  agentbox egress "$id" --allow 198.18.0.0/15:443
  agentbox egress "$id" --egress none
  agentbox egress log "$id"`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if f.preview != "" {
				return usageErrorf("--preview is fixed at create")
			}
			if f.egress == "" && len(f.allow) == 0 && len(f.deny) == 0 && (f.maxConns != 0 || f.bandwidth != 0) {
				return setLimitsOnly(c, g, args[0], &f) // limits.go
			}
			n := f.request()
			if n == nil {
				return usageErrorf("give --egress, --allow or --deny")
			}
			if n.Egress == "" {
				n.Egress = api.EgressInternet // --deny alone: the internet minus those
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.SetNetwork(c.Context(), args[0], *n)
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), sb)
		},
	}
	f.register(cmd.Flags())
	cmd.AddCommand(newEgressLogCommand(g))
	return cmd
}
