package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/errdefs"
)

// destroyTimeout bounds the destroy run does on its way out.
const destroyTimeout = 30 * time.Second

func newRunCommand(g *globals) *cobra.Command {
	var (
		cf createFlags
		ef execFlags
	)
	c := &cobra.Command{
		Use:   "run [create flags] -- CMD [ARGS...]",
		Short: "Create a sandbox, run one command in it, destroy it",
		Long: `Create a sandbox, run one command in it with its output streamed here, and
destroy the sandbox (also on Ctrl-C). agentbox exits with the command's exit
status. --env sets the sandbox's environment, which the command inherits.`,
		Example: `  agentbox run --template base --memory 512M -- python3 -c 'print(1+1)'`,
		Args:    minArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if dash := c.ArgsLenAtDash(); dash > 0 {
				return usageErrorf("run takes no arguments before --, got %q; usage: %s", args[:dash], c.UseLine())
			}
			creq, err := cf.request()
			if err != nil {
				return err
			}
			ereq, err := ef.request(args)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.CreateSandbox(c.Context(), creq)
			if err != nil {
				return err
			}
			defer func() {
				// The command's context may be cancelled (Ctrl-C): destroy
				// on a context of its own.
				ctx, cancel := context.WithTimeout(context.WithoutCancel(c.Context()), destroyTimeout)
				defer cancel()
				if derr := cl.DestroySandbox(ctx, sb.ID); derr != nil && !errors.Is(derr, errdefs.ErrNotFound) {
					fmt.Fprintf(c.ErrOrStderr(), "agentbox: destroying sandbox %s: %v; remove it with agentbox rm %s\n", sb.ID, derr, sb.ID)
				}
			}()
			return streamExec(c, cl, sb.ID, ereq, ef.interactive)
		},
	}
	cf.register(c.Flags())
	ef.register(c.Flags(), false)
	return c
}
