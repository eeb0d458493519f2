package cli

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// Templates and snapshots through an OCI registry (docs/cluster.md).

func newTemplatePushCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "push NAME REF",
		Short: "Push a template's newest version to an OCI registry (REF: HOST[:PORT]/REPO[:TAG]); prints the digest",
		Args:  exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			out, err := cl.PushTemplate(c.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pushed %s to %s in %s\n", args[0], out.Ref, time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(c.OutOrStdout(), out.Digest)
			return nil
		},
	}
}

func newTemplatePullCommand(g *globals) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "pull REF [--name NAME]",
		Short: "Pull an OCI image from a registry as a new template version (default name: the repository's last component)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			t, err := cl.PullTemplate(c.Context(), args[0], name)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pulled %s in %s\n", args[0], time.Since(start).Round(time.Millisecond))
			fmt.Fprintf(c.OutOrStdout(), "%s %s\n", t.Name, t.Version)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "the template's name (default: the repository's last component)")
	return c
}

func newSnapshotPushCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "push SNAPSHOT DEST",
		Short: "Push a snapshot's files to an OCI registry (DEST: HOST[:PORT]/REPO[:TAG]); prints the digest",
		Args:  exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			out, err := cl.PushSnapshot(c.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pushed %s to %s in %s\n", args[0], out.Ref, time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(c.OutOrStdout(), out.Digest)
			return nil
		},
	}
}

func newSnapshotPullCommand(g *globals) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "pull REF [--name NAME]",
		Short: "Pull a pushed snapshot into a new snapshot here (its template is pulled too when missing and pushed); prints its id",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			snap, err := cl.PullSnapshot(c.Context(), args[0], name)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pulled %s in %s\n", args[0], time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(c.OutOrStdout(), snap.ID)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", "the snapshot's name (default: none)")
	return c
}
