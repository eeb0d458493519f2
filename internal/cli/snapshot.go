package cli

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

func newSnapshotCommand(g *globals) *cobra.Command {
	var (
		name   string
		memory bool
	)
	c := &cobra.Command{
		Use:   "snapshot ID [--name N] | snapshot ls|inspect|rm",
		Short: "Capture a sandbox's files as a snapshot (prints its name or id); manage snapshots",
		Example: `  agentbox snapshot "$id" --name after-setup
  agentbox create --snapshot after-setup
  agentbox snapshot ls
  agentbox snapshot rm after-setup`,
		Args: exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			create := cl.CreateSnapshot
			if memory {
				create = cl.CreateMemorySnapshot
			}
			snap, err := create(c.Context(), args[0], name)
			if err != nil {
				return err
			}
			if snap.Name != "" {
				fmt.Fprintln(c.OutOrStdout(), snap.Name)
			} else {
				fmt.Fprintln(c.OutOrStdout(), snap.ID)
			}
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "name the snapshot (unique among yours)")
	c.Flags().BoolVar(&memory, "memory", false, "capture processes and memory too (gvisor tier): a sandbox created from it goes on running them")
	c.AddCommand(newSnapshotLsCommand(g), newSnapshotInspectCommand(g), newSnapshotRmCommand(g),
		newSnapshotPushCommand(g), newSnapshotPullCommand(g)) // registry.go
	return c
}

func newSnapshotLsCommand(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List snapshots",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			list, err := cl.ListSnapshots(c.Context())
			if err != nil {
				return err
			}
			if asJSON {
				if list == nil {
					list = []api.Snapshot{}
				}
				return printJSON(c.OutOrStdout(), list)
			}
			return printSnapshotTable(c.OutOrStdout(), list, time.Now())
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the list as JSON")
	return c
}

func printSnapshotTable(w io.Writer, list []api.Snapshot, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tSANDBOX\tTEMPLATE\tPARENT\tSIZE\tAGE")
	for _, s := range list {
		name, parent := s.Name, s.Parent
		if name == "" {
			name = "-"
			if s.Internal {
				name = "(fork)"
			}
		}
		if parent == "" {
			parent = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s@%s\t%s\t%s\t%s\n", s.ID, name, s.SandboxID, s.Template, s.TemplateVersion,
			parent, formatBytes(s.SizeBytes), formatAge(now.Sub(s.CreatedAt)))
	}
	return tw.Flush()
}

func newSnapshotInspectCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "inspect SNAPSHOT",
		Short: "Show a snapshot (id or name) as JSON",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			snap, err := cl.GetSnapshot(c.Context(), args[0])
			if err != nil {
				return err
			}
			return printJSON(c.OutOrStdout(), snap)
		},
	}
}

func newSnapshotRmCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm SNAPSHOT...",
		Short: "Remove snapshots (refused while a sandbox or snapshot depends on one)",
		Args:  minArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			for _, ref := range args {
				if err := cl.DeleteSnapshot(c.Context(), ref); err != nil {
					return err
				}
			}
			return nil
		},
	}
}
