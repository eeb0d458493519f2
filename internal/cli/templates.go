package cli

import (
	"context"
	"fmt"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/version"
)

func newTemplateCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "template",
		Short: "List, import, inspect and remove templates",
	}
	c.AddCommand(newTemplateLsCommand(g), newTemplateImportCommand(g),
		newTemplateInspectCommand(g), newTemplateRmCommand(g), newTemplateBuildCommand(g),
		newTemplatePushCommand(g), newTemplatePullCommand(g)) // registry.go
	return c
}

func newTemplateLsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List templates",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			ts, err := cl.ListTemplates(c.Context())
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tVERSION\tSIZE\tCREATED\tTENANT")
			now := time.Now()
			for _, t := range ts {
				owner := t.Tenant // empty: public
				if owner == "" {
					owner = "(public)"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s ago\t%s\n", t.Name, t.Version, formatBytes(t.SizeBytes), formatAge(now.Sub(t.CreatedAt)), owner)
			}
			return tw.Flush()
		},
	}
}

func newTemplateImportCommand(g *globals) *cobra.Command {
	var (
		rootfs, user, workdir, name string
		memory                      string
		env                         []string
	)
	c := &cobra.Command{
		Use:   "import (FILE --name NAME | NAME --rootfs DIR) [--user U] [--workdir D] [--env K=V]... [--memory M]",
		Short: "Make a template from an image archive (docker save or OCI layout) or a root filesystem directory on the daemon's host",
		Long: `Make a new template version.

  agentbox template import FILE --name NAME
      uploads FILE, a docker save archive or a tar of an OCI image layout
      (optionally gzipped); the image's env, workdir, user are the defaults.
      With a tenant's key the template is that tenant's own; with an admin
      key it is public.
  agentbox template import NAME --rootfs DIR
      copies DIR, a root filesystem directory on the daemon's host (admin).`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			if rootfs != "" && name != "" {
				return usageErrorf("template import takes either FILE --name NAME or NAME --rootfs DIR, not both")
			}
			var memMB int64
			if memory != "" {
				var err error
				if memMB, err = parseSizeMB("memory", memory); err != nil {
					return err
				}
			}
			if name != "" {
				envMap, err := parseKV("env", env)
				if err != nil {
					return err
				}
				return uploadTemplate(c, g, args[0], api.ImportTemplateRequest{Name: name, User: user, Workdir: workdir, Env: envMap, MemoryMB: memMB})
			}
			if rootfs == "" {
				return usageErrorf("template import wants FILE --name NAME (an image archive) or NAME --rootfs DIR (a root filesystem directory on the daemon's host)")
			}
			abs, err := filepath.Abs(rootfs)
			if err != nil {
				return fmt.Errorf("resolving --rootfs %q: %w", rootfs, err)
			}
			envMap, err := parseKV("env", env)
			if err != nil {
				return err
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			t, err := cl.ImportTemplate(c.Context(), api.ImportTemplateRequest{Name: args[0], Rootfs: abs, User: user, Workdir: workdir, Env: envMap, MemoryMB: memMB})
			if err != nil {
				return err
			}
			fmt.Fprintf(c.OutOrStdout(), "%s %s\n", t.Name, t.Version)
			return nil
		},
	}
	c.Flags().StringVar(&rootfs, "rootfs", "", "root filesystem directory (on the daemon's host)")
	c.Flags().StringVar(&name, "name", "", "template name, when importing an image archive FILE")
	c.Flags().StringVar(&user, "user", "", "default user of the template's processes")
	c.Flags().StringVar(&workdir, "workdir", "", "default working directory")
	c.Flags().StringArrayVar(&env, "env", nil, "default environment KEY=VALUE (repeatable)")
	c.Flags().StringVar(&memory, "memory", "", "default memory limit of its sandboxes, e.g. 2G (sandboxes that ask for none get it instead of the daemon's default)")
	return c
}

func formatBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%dB", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f%ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

func newVersionCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of this client and of the daemon",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			out := c.OutOrStdout()
			fmt.Fprintf(out, "client: %s\n", version.Version)
			cl, err := g.client()
			if err != nil {
				fmt.Fprintf(out, "daemon: %v\n", err)
				return nil
			}
			ctx, cancel := context.WithTimeout(c.Context(), 3*time.Second)
			defer cancel()
			h, err := cl.Health(ctx)
			if err != nil {
				fmt.Fprintf(out, "daemon: not reachable at %s\n", cl.Host())
				return nil
			}
			fmt.Fprintf(out, "daemon: %s (%s)\n", h.Version, cl.Host())
			return nil
		},
	}
}
