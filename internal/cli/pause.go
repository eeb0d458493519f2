package cli

import (
	"fmt"

	"github.com/spf13/cobra"
)

func newPauseCommand(g *globals) *cobra.Command {
	var toDisk bool
	c := &cobra.Command{
		Use:   "pause ID [--to-disk]",
		Short: "Freeze every process of a sandbox (memory kept, no CPU)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			pause := cl.PauseSandbox
			if toDisk {
				pause = cl.PauseSandboxToDisk
			}
			sb, err := pause(c.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), sb.State)
			return nil
		},
	}
	c.Flags().BoolVar(&toDisk, "to-disk", false, "checkpoint processes and memory to disk and free the host memory (gvisor tier); resume restores them")
	return c
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
