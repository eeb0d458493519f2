package cli

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

func newLsCommand(g *globals) *cobra.Command {
	var (
		asJSON, quiet bool
		state         string
		meta          []string
		limit         int
		cursor        string
	)
	c := &cobra.Command{
		Use:   "ls [--json | -q] [--state S] [--meta K=V]... [--limit N [--cursor C]]",
		Short: "List sandboxes",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			md, err := parseKV("meta", meta)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			if cursor != "" && limit == 0 {
				return usageErrorf("--cursor needs --limit: pass the same --limit as the command that printed the cursor")
			}
			page, err := cl.ListSandboxesPage(c.Context(), client.ListOptions{State: state, Metadata: md, Limit: limit, Cursor: cursor})
			if err != nil {
				return err
			}
			sbs := page.Sandboxes
			if page.NextCursor != "" {
				// The table, ids or JSON stay what scripts parse; the way
				// on goes to stderr.
				fmt.Fprintf(c.ErrOrStderr(), "more: agentbox ls --limit %d --cursor %s (and the same filters)\n", limit, page.NextCursor)
			}
			if asJSON {
				if sbs == nil {
					sbs = []api.Sandbox{}
				}
				return printJSON(c.OutOrStdout(), sbs)
			}
			if quiet {
				for _, sb := range sbs {
					fmt.Fprintln(c.OutOrStdout(), sb.ID)
				}
				return nil
			}
			return printSandboxTable(c.OutOrStdout(), sbs, time.Now())
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	c.Flags().BoolVarP(&quiet, "quiet", "q", false, "print the ids only, one a line")
	c.Flags().StringVar(&state, "state", "", "only sandboxes in this state (creating, running, paused, stopped, failed, ...)")
	c.Flags().StringArrayVar(&meta, "meta", nil, "only sandboxes with this metadata KEY=VALUE (repeatable; all must match)")
	c.Flags().IntVar(&limit, "limit", 0, "at most N sandboxes (1-1000), oldest first; a cursor to the rest goes to stderr")
	c.Flags().StringVar(&cursor, "cursor", "", "the page after this cursor (printed by ls --limit)")
	return c
}

func printSandboxTable(w io.Writer, sbs []api.Sandbox, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSTATE\tTEMPLATE\tISOLATION\tAGE\tEXPIRES")
	for _, sb := range sbs {
		expires := "never"
		if sb.ExpiresAt != nil {
			if d := sb.ExpiresAt.Sub(now); d > 0 {
				expires = "in " + formatAge(d)
			} else {
				expires = "now"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.ID, orDash(sb.Metadata[NameKey]), sb.State, sb.Template, orDash(sb.Isolation),
			formatAge(now.Sub(sb.CreatedAt)), expires)
	}
	return tw.Flush()
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func newInspectCommand(g *globals) *cobra.Command {
	var security, asJSON bool
	c := &cobra.Command{
		Use:   "inspect ID [--security [--json]]",
		Short: "Show a sandbox as JSON; --security runs the host-side posture check (admin)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if security {
				return runSecurityInspect(c, g, args[0], asJSON) // security.go
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.GetSandbox(c.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), sb)
		},
	}
	c.Flags().BoolVar(&security, "security", false, "check every process's isolation from the host: NoNewPrivs, seccomp, capabilities, namespaces, uid map, cgroup, fds")
	c.Flags().BoolVar(&asJSON, "json", false, "with --security: print the report as JSON")
	return c
}

func newRmCommand(g *globals) *cobra.Command {
	var force, all bool
	var meta []string
	c := &cobra.Command{
		Use:   "rm [-f] (ID... | --all [--meta K=V]...)",
		Short: "Destroy sandboxes (by id, name or id prefix; --all: every one ls shows)",
		Long: `Destroy sandboxes, running or not, and everything they hold. Each may be
given by id, name or a unique id prefix. --all destroys every sandbox ls
shows (with an admin key: every tenant's), or with --meta only those with
that metadata. -f ignores sandboxes that do not exist.`,
		Args: func(c *cobra.Command, args []string) error {
			if all && len(args) > 0 {
				return usageErrorf("rm takes ids or --all, not both")
			}
			if !all && len(args) == 0 {
				return usageErrorf("rm wants the sandboxes to destroy (ids or names), or --all; usage: %s", c.UseLine())
			}
			if !all && len(meta) > 0 {
				return usageErrorf("--meta goes with --all")
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			if all {
				md, err := parseKV("meta", meta)
				if err != nil {
					return err
				}
				sbs, err := cl.ListSandboxes(c.Context(), client.ListOptions{Metadata: md})
				if err != nil {
					return err
				}
				for _, sb := range sbs {
					args = append(args, sb.ID)
				}
			}
			failed := 0
			for _, id := range args {
				if err := cl.DestroySandbox(c.Context(), id); err != nil {
					if force && errors.Is(err, errdefs.ErrNotFound) {
						continue
					}
					failed++
					fmt.Fprintf(c.ErrOrStderr(), "agentbox: %s: %v\n", id, err)
					continue
				}
				fmt.Fprintln(c.OutOrStdout(), id)
			}
			if failed > 0 {
				return &ExitError{Code: 1}
			}
			return nil
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "ignore sandboxes that do not exist")
	c.Flags().BoolVar(&all, "all", false, "destroy every sandbox ls shows")
	c.Flags().StringArrayVar(&meta, "meta", nil, "with --all: only sandboxes with this metadata KEY=VALUE (repeatable)")
	return c
}

func newTTLCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ttl ID DURATION",
		Short: "Make a sandbox expire DURATION from now (\"none\": never)",
		Example: `  agentbox ttl sb-123 2h
  agentbox ttl sb-123 none`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			secs, err := parseTTLSeconds("ttl", args[1])
			if err != nil {
				return usageErrorf("ttl wants a duration like 30m, 2h or 1d, or \"none\" for no TTL, got %q", args[1])
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			sb, err := cl.UpdateSandbox(c.Context(), args[0], api.UpdateSandboxRequest{TTLSeconds: &secs})
			if err != nil {
				return err
			}
			if sb.ExpiresAt == nil {
				fmt.Fprintf(c.OutOrStdout(), "%s never expires\n", sb.ID)
			} else {
				fmt.Fprintf(c.OutOrStdout(), "%s expires at %s\n", sb.ID, sb.ExpiresAt.Local().Format(time.RFC3339))
			}
			return nil
		},
	}
}
