package cli

import (
	"fmt"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

func newPsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ps ID",
		Short: "List a sandbox's background processes",
		Long: `List a sandbox's background processes (started with exec -d, or through the
API), running and recently ended: pid, tag, state, exit code, age, command.
A process the OOM killer ended (at the sandbox's memory limit) is in state
"exited (oom)"; one its timeout ended, "exited (timeout)".`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			procs, err := cl.ListProcesses(c.Context(), args[0])
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "PID\tTAG\tSTATE\tEXIT\tSTARTED\tCOMMAND")
			for _, p := range procs {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", p.Pid, orDash(p.Tag), stateText(p), exitText(p),
					time.Since(p.StartedAt).Round(time.Second).String()+" ago", oneLine(strings.Join(p.Cmd, " ")))
			}
			return tw.Flush()
		},
	}
}

// oneLine writes s on one table row: newlines, tabs and other control
// characters as Go escapes (\n, \t).
func oneLine(s string) string {
	if !strings.ContainsFunc(s, unicode.IsControl) {
		return s
	}
	q := strconv.Quote(s)
	return q[1 : len(q)-1]
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// stateText is a process's state, with why it ended where that is known.
func stateText(p api.Process) string {
	switch {
	case p.State != api.ProcessExited:
		return p.State
	case p.OOMKilled:
		return p.State + " (oom)"
	case p.TimedOut:
		return p.State + " (timeout)"
	}
	return p.State
}

func exitText(p api.Process) string {
	switch {
	case p.State != api.ProcessExited:
		return "-"
	case p.Signal != "":
		return p.Signal
	case p.ExitCode != nil:
		return strconv.Itoa(*p.ExitCode)
	}
	return "?"
}

// startDetached starts req as a background process and prints its pid.
func startDetached(c *cobra.Command, cl *client.Client, id string, req api.ExecRequest, tag string) error {
	p, err := cl.StartProcess(c.Context(), id, api.StartProcessRequest{Cmd: req.Cmd, Env: req.Env, Cwd: req.Cwd, User: req.User, TimeoutMs: req.TimeoutMs, Tag: tag})
	if err != nil {
		return err
	}
	fmt.Fprintln(c.OutOrStdout(), p.Pid)
	return nil
}
