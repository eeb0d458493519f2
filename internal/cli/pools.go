package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func newPoolsCommand(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "pools [--json]",
		Short: "Show the warm pools: sandboxes booted ahead of time, per template and tier",
		Long: `pools lists the daemon's [[pool]] entries (docs/config.md): for each, the
template, tier, limits and egress of its sandboxes, how many are ready of
its size, and how many creates it served, missed (matched while empty)
and booted since the daemon started. A create that matches a pool is
answered with one of its sandboxes (docs/PERFORMANCE.md, "Warm pools").`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			ps, err := cl.Pools(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(ps)
			}
			if len(ps) == 0 {
				fmt.Fprintln(c.OutOrStdout(), "no warm pools configured (add [[pool]] entries to the daemon's config)")
				return nil
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "TEMPLATE\tISOLATION\tREADY\tCPU\tMEMORY\tDISK\tPIDS\tEGRESS\tSERVED\tMISSES\tBOOTED\tFAILURES\tLAST ERROR")
			for _, p := range ps {
				fmt.Fprintf(tw, "%s\t%s\t%d/%d\t%g\t%d MB\t%d MB\t%d\t%s\t%d\t%d\t%d\t%d\t%s\n",
					p.Template, p.Isolation, p.Ready, p.Size, p.Resources.CPU, p.Resources.MemoryMB,
					p.Resources.DiskMB, p.Resources.Pids, p.Egress, p.Served, p.Misses, p.Booted, p.Failures, p.LastError)
			}
			return tw.Flush()
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the pools as JSON")
	return c
}
