package cli

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

func newEgressLogCommand(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "log ID",
		Short: "Show a sandbox's egress log",
		Long: `Print the sandbox's egress log, oldest first: every DNS query its
resolver answered or refused and every web connection (ports 80 and 443
of a sandbox with domain rules) its SNI/Host proxy let through or closed,
with the deciding rule. The last 1000 decisions are kept.`,
		Example: `  agentbox egress log "$id"
  agentbox egress log "$id" --json`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			l, err := cl.EgressLog(c.Context(), args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), l)
			}
			return printEgressLog(c.OutOrStdout(), l)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the log as JSON")
	return c
}

func printEgressLog(w io.Writer, l *api.EgressLog) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tKIND\tDEST\tNAME\tVERDICT\tREASON")
	for _, e := range l.Entries {
		name := e.Name
		if name == "" {
			name = "-"
		}
		if e.QType != "" {
			name += " " + e.QType
		}
		reason := e.Reason
		if len(e.Answers) > 0 {
			reason += " -> " + strings.Join(e.Answers, ",")
		}
		fmt.Fprintf(tw, "%s\t%s/%s\t%s\t%s\t%s\t%s\n", e.Time.Local().Format(time.TimeOnly+".000"), e.Kind, e.Proto, e.Dest, name, e.Verdict, reason)
	}
	if l.Dropped > 0 {
		fmt.Fprintf(tw, "(%d older entries dropped)\n", l.Dropped)
	}
	return tw.Flush()
}
