package cli

import (
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
)

func newURLCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "url ID PORT",
		Short: "Print the preview URL of a port inside a sandbox",
		Long: `Print http://PORT-ID.<preview domain>/ for a server listening on PORT inside
the sandbox (127.0.0.1 is fine). Unless the sandbox was created with
--preview public, the URL carries the sandbox's preview token.`,
		Example: `  agentbox exec -d "$id" -- python3 -m http.server 8000
  curl "$(agentbox url "$id" 8000)"`,
		Args: exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			port, err := strconv.Atoi(args[1])
			if err != nil || port < 1 || port > 65535 {
				return usageErrorf("PORT must be 1-65535, got %q", args[1])
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			u, err := cl.PreviewURL(c.Context(), args[0], port)
			if err != nil {
				return err
			}
			fmt.Fprintln(c.OutOrStdout(), u)
			return nil
		},
	}
}
