package cli

import (
	"errors"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/errdefs"
)

func newKillCommand(g *globals) *cobra.Command {
	var sig string
	var tree bool
	c := &cobra.Command{
		Use:   "kill [-s SIG] ID PID|TAG",
		Short: "Signal or kill a background process (or end a terminal session by its pid)",
		Long: `Without -s, kill a background process and its whole process tree (every
process it started, double forks included) and forget it. With -s, send
that signal (a name like INT or SIGTERM, or a number) to the process, or with
--tree to every process of its tree.`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			if sig == "" {
				err := cl.KillProcess(c.Context(), args[0], args[1])
				// Not a background process: maybe a terminal session
				// (shell, exec -t) by its pid.
				if pid, perr := strconv.Atoi(args[1]); errors.Is(err, errdefs.ErrNotFound) && perr == nil {
					if cl.KillPTY(c.Context(), args[0], pid) == nil {
						return nil
					}
				}
				return err
			}
			return cl.SignalProcess(c.Context(), args[0], args[1], sig, tree)
		},
	}
	c.Flags().StringVarP(&sig, "signal", "s", "", "signal to send instead of killing the tree, e.g. INT, TERM, HUP or 9")
	c.Flags().BoolVar(&tree, "tree", false, "with -s, signal every process of the process's tree")
	return c
}
