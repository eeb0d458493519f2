package cli

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/spf13/cobra"
)

// Templates and snapshots through an OCI registry (docs/cluster.md).

func newTemplatePushCommand(g *globals) *cobra.Command {
	return newPushCommand(g, "push NAME REF",
		"Push a template's newest version to an OCI registry (REF: HOST[:PORT]/REPO[:TAG]); prints the digest",
		(*client.Client).PushTemplate)
}

func newTemplatePullCommand(g *globals) *cobra.Command {
	return newPullCommand(g,
		"Pull an OCI image from a registry as a new template version (default name: the repository's last component)",
		"the template's name (default: the repository's last component)",
		func(ctx context.Context, cl *client.Client, ref, name string) (string, error) {
			t, err := cl.PullTemplate(ctx, ref, name)
			if err != nil {
				return "", err
			}
			return t.Name + " " + t.Version, nil
		})
}

func newSnapshotPushCommand(g *globals) *cobra.Command {
	return newPushCommand(g, "push SNAPSHOT DEST",
		"Push a snapshot's files (and its memory, gvisor) to an OCI registry (DEST: HOST[:PORT]/REPO[:TAG]); prints the digest",
		(*client.Client).PushSnapshot)
}

func newSnapshotPullCommand(g *globals) *cobra.Command {
	return newPullCommand(g,
		"Pull a pushed snapshot into a new snapshot here (its template is pulled too when missing and pushed); prints its id",
		"the snapshot's name (default: none)",
		func(ctx context.Context, cl *client.Client, ref, name string) (string, error) {
			snap, err := cl.PullSnapshot(ctx, ref, name)
			if err != nil {
				return "", err
			}
			return snap.ID, nil
		})
}

// newPushCommand is a "push WHAT REF" verb: push runs it, the time goes
// to stderr and the digest to stdout.
func newPushCommand(g *globals, use, short string, push func(*client.Client, context.Context, string, string) (*api.PushResponse, error)) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			out, err := push(cl, c.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pushed %s to %s in %s\n", args[0], out.Ref, time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(c.OutOrStdout(), out.Digest)
			return nil
		},
	}
}

// newPullCommand is a "pull REF [--name NAME]" verb: pull runs it and
// returns the line for stdout; the time goes to stderr.
func newPullCommand(g *globals, short, nameHelp string, pull func(ctx context.Context, cl *client.Client, ref, name string) (string, error)) *cobra.Command {
	var name string
	c := &cobra.Command{
		Use:   "pull REF [--name NAME]",
		Short: short,
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			start := time.Now()
			line, err := pull(c.Context(), cl, args[0], name)
			if err != nil {
				return err
			}
			fmt.Fprintf(c.ErrOrStderr(), "pulled %s in %s\n", args[0], time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(c.OutOrStdout(), line)
			return nil
		},
	}
	c.Flags().StringVar(&name, "name", "", nameHelp)
	return c
}
