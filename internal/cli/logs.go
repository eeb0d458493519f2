package cli

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newLogsCommand(g *globals) *cobra.Command {
	var (
		follow bool
		tail   int
	)
	c := &cobra.Command{
		Use:   "logs [-f] [--tail N] ID PID|TAG",
		Short: "Print a background process's output",
		Long: `Print what a background process wrote to stdout and stderr (what its ring
buffers still hold: the last 1 MiB of each by default). With -f, keep
following until it ends; Ctrl-C detaches and leaves it running. --tail N
prints only the last N lines of each stream held so far.`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			id, ref := args[0], args[1]
			out, err := cl.ProcessOutput(c.Context(), id, ref, 0, 0)
			if err != nil {
				return err
			}
			if out.StdoutDropped+out.StderrDropped > 0 {
				fmt.Fprintf(c.ErrOrStderr(), "agentbox: %d bytes of older output are gone (past the ring buffer)\n", out.StdoutDropped+out.StderrDropped)
			}
			if tail >= 0 {
				out.Stdout, out.Stderr = lastLines(out.Stdout, tail), lastLines(out.Stderr, tail)
			}
			c.OutOrStdout().Write(out.Stdout)
			c.ErrOrStderr().Write(out.Stderr)
			if !follow || out.State == api.ProcessExited {
				return nil
			}
			_, err = cl.StreamProcess(c.Context(), id, ref, client.StreamOptions{StdoutOffset: out.StdoutOffset, StderrOffset: out.StderrOffset},
				func(ev *api.ExecEvent) error {
					w := c.OutOrStdout()
					if ev.Type == api.EventStderr {
						w = c.ErrOrStderr()
					}
					_, err := w.Write(ev.Data)
					return err
				})
			return err
		},
	}
	c.Flags().BoolVarP(&follow, "follow", "f", false, "keep printing output as it comes, until the process ends")
	c.Flags().IntVarP(&tail, "tail", "n", -1, "print only the last N lines of each stream held so far (then follow with -f)")
	return c
}

// lastLines returns the last n lines of b (a final line without a newline
// counts as one).
func lastLines(b []byte, n int) []byte {
	if n == 0 {
		return nil
	}
	end := len(b)
	if end > 0 && b[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if b[i] == '\n' {
			n--
			if n == 0 {
				return b[i+1:]
			}
		}
	}
	return b
}
