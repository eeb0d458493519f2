package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newPauseCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "pause ID",
		Short: "Freeze every process of a sandbox (memory kept, no CPU)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.PauseSandbox(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.State)
			return nil
		},
	}
}

func newResumeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "resume ID",
		Short: "Thaw a paused sandbox, or start a stopped one again on its files",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.ResumeSandbox(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.State)
			return nil
		},
	}
}
