package cli

import (
	"fmt"

	"github.com/spf13/cobra"
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
	var to string
	c := &cobra.Command{
		Use:   "reset ID [--to SNAPSHOT]",
		Short: "Put a sandbox back to its template or snapshot in place (same id)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.ResetSandbox(c.Context(), args[0], to)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.ID)
			return nil
		},
	}
	c.Flags().StringVar(&to, "to", "", "snapshot (id or name) to reset to (default: where the sandbox started)")
	return c
}
