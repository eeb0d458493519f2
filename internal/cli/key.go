package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

// `agentbox key create|ls|revoke`: API keys (admin; docs/SECURITY.md).

func newKeyCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "key create|ls|revoke",
		Short: "Manage API keys (admin)",
		Example: `  agentbox tenant create acme --sandboxes 10
  agentbox key create --tenant acme --name ci   # prints the secret, once
  agentbox key ls --tenant acme
  agentbox key revoke key_0123456789ab`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error { return c.Help() },
	}
	c.AddCommand(newKeyCreateCommand(g), newKeyLsCommand(g), newKeyRevokeCommand(g))
	return c
}

func newKeyCreateCommand(g *globals) *cobra.Command {
	var (
		req    api.CreateKeyRequest
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "create --tenant T [--name N] [--admin] [--json]",
		Short: "Create an API key and print its secret (shown only this once)",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if req.Tenant == "" {
				return usageError{fmt.Errorf("--tenant is required (see %s --help)", c.CommandPath())}
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			k, err := cl.CreateKey(c.Context(), req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.OutOrStdout(), k)
			}
			fmt.Fprintln(c.OutOrStdout(), k.Secret)
			fmt.Fprintf(c.ErrOrStderr(), "created %s for tenant %s; the secret above is not shown again: store it now (AGENTBOX_API_KEY)\n", k.ID, k.Tenant)
			return nil
		},
	}
	c.Flags().StringVar(&req.Tenant, "tenant", "", "tenant the key acts for (required)")
	c.Flags().StringVar(&req.Name, "name", "", "a label for the key")
	c.Flags().BoolVar(&req.Admin, "admin", false, "make an admin key (every tenant, keys and tenants)")
	c.Flags().BoolVar(&asJSON, "json", false, "print the key, secret included, as JSON")
	return c
}

func newKeyLsCommand(g *globals) *cobra.Command {
	var (
		tenant string
		asJSON bool
	)
	c := &cobra.Command{
		Use:   "ls [--tenant T] [--json]",
		Short: "List API keys (never their secrets)",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			keys, err := cl.ListKeys(c.Context(), tenant)
			if err != nil {
				return err
			}
			if asJSON {
				if keys == nil {
					keys = []api.Key{}
				}
				return printJSON(c.OutOrStdout(), keys)
			}
			return printKeyTable(c.OutOrStdout(), keys, time.Now())
		},
	}
	c.Flags().StringVar(&tenant, "tenant", "", "only this tenant's keys")
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return c
}

func printKeyTable(w io.Writer, keys []api.Key, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTENANT\tNAME\tADMIN\tCREATED\tLAST USED\tSTATE")
	for _, k := range keys {
		name, used, state := k.Name, "never", "active"
		if name == "" {
			name = "-"
		}
		if k.LastUsedAt != nil {
			used = ago(now, *k.LastUsedAt)
		}
		if k.RevokedAt != nil {
			state = "revoked " + ago(now, *k.RevokedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%v\t%s\t%s\t%s\n", k.ID, k.Tenant, name, k.Admin, ago(now, k.CreatedAt), used, state)
	}
	return tw.Flush()
}

// ago is a short "3m ago".
func ago(now, t time.Time) string {
	d := now.Sub(t).Round(time.Second)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds ago", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm ago", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh ago", int(d.Hours()))
	}
	return fmt.Sprintf("%dd ago", int(d.Hours()/24))
}

func newKeyRevokeCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "revoke ID...",
		Short: "Revoke API keys; their next request fails",
		Args:  minArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			for _, id := range args {
				if err := cl.RevokeKey(c.Context(), id); err != nil {
					return fmt.Errorf("%s: %w", id, err)
				}
				fmt.Fprintln(c.OutOrStdout(), id)
			}
			return nil
		},
	}
}
