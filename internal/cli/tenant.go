package cli

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

// `agentbox tenant create|ls|inspect|set|rm`: tenants and their quotas
// (admin; docs/SECURITY.md). A quota of 0 means no limit.

func newTenantCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "tenant create|ls|inspect|set|rm",
		Short: "Manage tenants and their quotas (admin)",
		Example: `  agentbox tenant create acme --sandboxes 10 --cpu 8 --memory 16G --disk 100G --pids 4096
  agentbox tenant ls
  agentbox tenant set acme --sandboxes 20
  agentbox tenant rm acme`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(newTenantCreateCommand(g), newTenantLsCommand(g), newTenantInspectCommand(g),
		newTenantSetCommand(g), newTenantRmCommand(g))
	return c
}

// quotaFlags adds --sandboxes, --cpu, --memory, --disk and --pids to c.
func quotaFlags(c *cobra.Command, q *api.Quotas) {
	c.Flags().Int64Var(&q.Sandboxes, "sandboxes", 0, "most sandboxes creating, running or paused at once (0: no limit)")
	c.Flags().Float64Var(&q.CPU, "cpu", 0, "most CPU cores of those sandboxes together (0: no limit)")
	c.Flags().Var((*sizeMBFlag)(&q.MemoryMB), "memory", "most memory of those sandboxes together, e.g. 16G or 512M; plain numbers are MiB (0: no limit)")
	c.Flags().Var((*sizeMBFlag)(&q.DiskMB), "disk", "most disk of every sandbox not destroyed, e.g. 100G; plain numbers are MiB (0: no limit)")
	c.Flags().Int64Var(&q.Pids, "pids", 0, "most processes and threads of the sandboxes creating, running or paused, as the sum of their pids limits (0: no limit)")
}

func newTenantCreateCommand(g *globals) *cobra.Command {
	var q api.Quotas
	c := &cobra.Command{
		Use:   "create NAME [--sandboxes N] [--cpu C] [--memory SIZE] [--disk SIZE] [--pids N]",
		Short: "Create a tenant",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			t, err := cl.CreateTenant(c.Context(), api.CreateTenantRequest{Name: args[0], Quotas: &q})
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), t.Name)
			return nil
		},
	}
	quotaFlags(c, &q)
	return c
}

func newTenantLsCommand(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List tenants with their quotas and usage",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			list, err := cl.ListTenants(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Tenant{}
				}
				return printJSON(c.OutOrStdout(), list)
			}
			return printTenantTable(c.OutOrStdout(), list)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return c
}

// usedOf is "used/quota", "used/-" when unlimited.
func usedOf(used, quota float64) string {
	if quota == 0 {
		return fmt.Sprintf("%g/-", used)
	}
	return fmt.Sprintf("%g/%g", used, quota)
}

func printTenantTable(w io.Writer, list []api.Tenant) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSANDBOXES\tCPU\tMEMORY MB\tDISK MB\tPIDS")
	for _, t := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", t.Name,
			usedOf(float64(t.Usage.Sandboxes), float64(t.Quotas.Sandboxes)),
			usedOf(t.Usage.CPU, t.Quotas.CPU),
			usedOf(float64(t.Usage.MemoryMB), float64(t.Quotas.MemoryMB)),
			usedOf(float64(t.Usage.DiskMB), float64(t.Quotas.DiskMB)),
			usedOf(float64(t.Usage.Pids), float64(t.Quotas.Pids)))
	}
	return tw.Flush()
}

func newTenantInspectCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect NAME",
		Short: "Show a tenant, its quotas and usage, as JSON",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			t, err := cl.GetTenant(c.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), t)
		},
	}
}

func newTenantSetCommand(g *globals) *cobra.Command {
	var q api.Quotas
	c := &cobra.Command{
		Use:   "set NAME [--sandboxes N] [--cpu C] [--memory SIZE] [--disk SIZE] [--pids N]",
		Short: "Change a tenant's quotas (only the flags given; 0 removes a limit)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			var p api.QuotasPatch
			f := c.Flags()
			if f.Changed("sandboxes") {
				p.Sandboxes = &q.Sandboxes
			}
			if f.Changed("cpu") {
				p.CPU = &q.CPU
			}
			if f.Changed("memory") {
				p.MemoryMB = &q.MemoryMB
			}
			if f.Changed("disk") {
				p.DiskMB = &q.DiskMB
			}
			if f.Changed("pids") {
				p.Pids = &q.Pids
			}
			if p == (api.QuotasPatch{}) {
				return usageError{fmt.Errorf("name at least one of --sandboxes, --cpu, --memory, --disk, --pids (see %s --help)", c.CommandPath())}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			t, err := cl.UpdateTenant(c.Context(), args[0], api.UpdateTenantRequest{Quotas: &p})
			if err != nil {
				return err
			}
			return printTenantTable(c.OutOrStdout(), []api.Tenant{*t})
		},
	}
	quotaFlags(c, &q)
	return c
}

func newTenantRmCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove a tenant without sandboxes or snapshots, revoking its keys",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			if err := cl.DeleteTenant(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), args[0])
			return nil
		},
	}
}
