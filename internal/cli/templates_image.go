package cli

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/api"
)

// uploadTemplate sends the image archive file to the daemon.
func uploadTemplate(c *cobra.Command, g *globals, file string, req api.ImportTemplateRequest) error {
	f, err := os.Open(file)
	if err != nil {
		return fmt.Errorf("opening the image archive: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return usageErrorf("%s is a directory: upload an archive (docker save, or tar an OCI layout: tar -C DIR -cf image.tar .)", file)
	}
	cl, err := g.client()
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(c.ErrOrStderr(), "uploading and importing %s (%s)...\n", file, formatBytes(fi.Size()))
	t, err := cl.UploadTemplate(c.Context(), req, newProgressReader(f, fi.Size(), c.ErrOrStderr(), "uploaded"))
	if err != nil {
		return err
	}
	fmt.Fprintf(c.ErrOrStderr(), "imported in %s\n", time.Since(start).Round(time.Millisecond))
	fmt.Fprintf(c.OutOrStdout(), "%s %s\n", t.Name, t.Version)
	return nil
}

func newTemplateInspectCommand(g *globals) *cobra.Command {
	var asJSON, pretty bool
	c := &cobra.Command{
		Use:   "inspect NAME [--pretty]",
		Short: "Show a template's newest version and its defaults as JSON (--pretty: as text)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			t, err := cl.GetTemplate(c.Context(), args[0])
			if err != nil {
				return err
			}
			out := c.OutOrStdout()
			if !pretty {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(t)
			}
			fmt.Fprintf(out, "name:     %s\nversion:  %s\nsize:     %s\ncreated:  %s\n", t.Name, t.Version, formatBytes(t.SizeBytes), t.CreatedAt.Format(time.RFC3339))
			if t.Source != "" {
				fmt.Fprintf(out, "source:   %s\n", t.Source)
			}
			if t.Tenant != "" {
				fmt.Fprintf(out, "tenant:   %s (only it and the admin see this template)\n", t.Tenant)
			} else {
				fmt.Fprintln(out, "tenant:   - (public)")
			}
			fmt.Fprintf(out, "user:     %s\nworkdir:  %s\n", orDash(t.User), orDash(t.Workdir))
			if len(t.Cmd) > 0 {
				fmt.Fprintf(out, "cmd:      %s\n", strings.Join(t.Cmd, " "))
			}
			printBuildInfo(out, t) // templates_build.go
			if len(t.Env) > 0 {
				fmt.Fprintln(out, "env:")
				for _, k := range slices.Sorted(maps.Keys(t.Env)) {
					fmt.Fprintf(out, "  %s=%s\n", k, t.Env[k])
				}
			}
			return nil
		},
	}
	c.Flags().BoolVar(&pretty, "pretty", false, "print a text summary instead of JSON")
	c.Flags().BoolVar(&asJSON, "json", false, "print the API object as JSON (the default)")
	c.Flags().Lookup("json").Hidden = true
	return c
}

func newTemplateRmCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME",
		Short: "Remove every version of a template; refused while sandboxes or snapshots use it (a tenant removes its own, an admin any)",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			if err := cl.RemoveTemplate(c.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), args[0])
			return nil
		},
	}
}
