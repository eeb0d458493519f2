package cli

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
)

func newFleetCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "fleet",
		Short: "A fleet gateway's nodes (docs/cluster.md)",
		Args:  exactArgs(0),
	}
	var asJSON bool
	nodes := &cobra.Command{
		Use:   "nodes [--json]",
		Short: "Show a fleet gateway's membership: each node, whether it is available, its last error and status",
		Long: `nodes lists the nodes of the gateway's [[fleet.node]] list and, with
[kubernetes], those registered in the cluster (docs/cluster.md): where the
gateway learned of each (SOURCE), whether each is available (its last poll
of GET /v1/node succeeded, no request failed to reach it since, and for a
cluster node its Lease is renewed), the creates in flight to it, its
sandboxes, free memory, load and ready templates as of the last poll, and
its last error (or why its Lease holds it down). It needs an admin key of the gateway; a node answers that
it is not a gateway.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			ns, err := cl.FleetNodes(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(c.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(ns)
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NODE\tSOURCE\tURL\tAVAILABLE\tSANDBOXES\tIN FLIGHT\tMEM FREE\tLOAD\tTEMPLATES\tLAST POLL\tLAST ERROR")
			for _, n := range ns {
				sbs, mem, load, tpls := "-", "-", "-", "-"
				if s := n.Status; s != nil {
					sbs, mem, load, tpls = fmt.Sprint(s.Sandboxes), fmt.Sprintf("%d MB", s.MemoryAvailableMB), fmt.Sprintf("%.2f", s.Load1), fmt.Sprint(len(s.Templates))
				}
				poll := "never"
				if n.LastPoll != nil {
					poll = time.Since(*n.LastPoll).Round(time.Millisecond).String() + " ago"
				}
				why := n.LastError
				if n.Lease != "" {
					why = n.Lease
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.Source, n.URL, n.Available, sbs, n.InFlight, mem, load, tpls, poll, why)
			}
			return tw.Flush()
		},
	}
	nodes.Flags().BoolVar(&asJSON, "json", false, "print the table as JSON")
	c.AddCommand(nodes)
	return c
}
