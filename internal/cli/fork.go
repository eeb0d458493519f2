package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

func newForkCommand(g *globals) *cobra.Command {
	var (
		count  int
		memory bool
	)
	c := &cobra.Command{
		Use:   "fork ID [--count N] [--memory]",
		Short: "Create N sandboxes from a sandbox's current files; prints one child id per line",
		Example: `  for child in $(agentbox fork "$id" --count 4); do
    agentbox exec "$child" -- ./try-a-strategy.sh &
  done`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if count < 1 {
				return usageErrorf("--count must be at least 1, got %d", count)
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			fork := cl.ForkSandbox
			if memory {
				fork = cl.ForkSandboxWithMemory
			}
			kids, err := fork(c.Context(), args[0], count)
			if err != nil {
				return err
			}
			for _, k := range kids {
				fmt.Fprintln(c.OutOrStdout(), k.ID)
			}
			return nil
		},
	}
	c.Flags().IntVar(&count, "count", 1, "how many children")
	c.Flags().BoolVar(&memory, "memory", false, "children go on running the parent's processes, memory included (gvisor tier)")
	return c
}

func newResetCommand(g *globals) *cobra.Command {
	var (
		to         string
		toTemplate bool
	)
	c := &cobra.Command{
		Use:   "reset ID [--to SNAPSHOT | --template]",
		Short: "Put a sandbox back to its template or snapshot in place (same id)",
		Long: `Put a sandbox back, in place (same id): by default to where it started (its
template, or the snapshot it was created from or last reset to); with --to
onto a snapshot; with --template onto its template alone, leaving any
snapshot. Every process is ended.`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if to != "" && toTemplate {
				return usageErrorf("reset takes --to SNAPSHOT or --template, not both")
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			reset := func() (*api.Sandbox, error) { return cl.ResetSandbox(c.Context(), args[0], to) }
			if toTemplate {
				reset = func() (*api.Sandbox, error) { return cl.ResetToTemplate(c.Context(), args[0]) }
			}
			sb, err := reset()
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.ID)
			return nil
		},
	}
	c.Flags().StringVar(&to, "to", "", "snapshot (id or name) to reset to (default: where the sandbox started)")
	c.Flags().BoolVar(&toTemplate, "template", false, "back to the sandbox's template, leaving the snapshot it was created from or last reset to")
	return c
}
