package cli

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// The MCP commands (docs/mcp.md).
func newMCPCommand(g *globals) *cobra.Command {
	c := &cobra.Command{
		Use:   "mcp",
		Short: "Serve agentbox's MCP tools over stdio; host MCP servers in sandboxes",
		Long: `agentbox mcp speaks the Model Context Protocol on its stdin and stdout, for MCP
clients that launch a command: it offers the daemon's MCP tools (sandbox_create,
exec, file_read, file_write, run_code, ...) with the rights of the API key it
runs with. The daemon also serves them over streamable HTTP at /mcp.

agentbox mcp host runs an untrusted stdio MCP server inside a sandbox and
prints its streamable HTTP endpoint, or with --stdio bridges it to stdin and
stdout. See docs/mcp.md.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			return serveStdio(c, g, cl, "/mcp")
		},
	}
	c.AddCommand(newMCPHostCommand(g), newMCPLsCommand(g), newMCPRmCommand(g))
	return c
}

// serveStdio bridges the command's stdin and stdout to the daemon's MCP
// endpoint at path. A binary without the MCP SDK (agentbox) runs the
// same command line in agentboxd instead.
func serveStdio(c *cobra.Command, g *globals, cl *client.Client, path string) error {
	if g.opts.MCPStdio == nil {
		return reexecDaemon(g, "mcp")
	}
	endpoint, hc := cl.MCPEndpoint(path)
	return g.opts.MCPStdio(c.Context(), endpoint, hc, io.NopCloser(c.InOrStdin()), nopWriteCloser{c.OutOrStdout()})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

func newMCPHostCommand(g *globals) *cobra.Command {
	var (
		f       createFlags
		name    string
		cwd     string
		sandbox string
		stdio   bool
	)
	c := &cobra.Command{
		Use:   "host [flags] -- COMMAND [ARG...]",
		Short: "Run a stdio MCP server inside a sandbox and expose it",
		Long: `Create a sandbox (or use --sandbox ID), start COMMAND in it as a supervised
stdio MCP server (restarted with backoff if it exits) and print its streamable
HTTP endpoint, which takes the same API key as the rest of the API. The server
sees only the sandbox: its files, its egress policy (--egress none by default:
no network), its limits. Every tool call is in the audit log.

With --stdio the command instead speaks MCP on its own stdin and stdout, so an
MCP client that launches commands can use the sandboxed server unchanged; the
sandbox it created is destroyed when the client goes away.`,
		Example: `  agentbox mcp host --template node --name fs -- npx @modelcontextprotocol/server-filesystem /data
  agentbox mcp host --template python --name tools --stdio -- python3 /srv/server.py`,
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErrorf("give the server's command after --, like: agentbox mcp host --name fs -- npx @modelcontextprotocol/server-filesystem /data")
			}
			if name == "" {
				return usageErrorf("--name is required: the server's name in its endpoint's path, like fs")
			}
			if stdio && g.opts.MCPStdio == nil {
				// The bridge is agentboxd's: it must make the sandbox
				// too, so hand it the command line before doing anything.
				return reexecDaemon(g, "mcp host --stdio")
			}
			cl, err := g.client()
			if err != nil {
				return err
			}
			ctx := c.Context()
			id, created := sandbox, false
			if id == "" {
				req, err := f.request()
				if err != nil {
					return err
				}
				sb, err := cl.CreateSandbox(ctx, req)
				if err != nil {
					return err
				}
				id, created = sb.ID, true
			}
			// cleanup destroys the sandbox made here: after a failed start,
			// and when a --stdio client goes away.
			cleanup := func() {
				if created {
					dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
					defer cancel()
					_ = cl.DestroySandbox(dctx, id)
				}
			}
			srv, err := cl.StartMCPServer(ctx, id, api.StartMCPServerRequest{Name: name, Command: args, Cwd: cwd})
			if err == nil {
				srv, err = waitMCPServer(ctx, cl, id, name)
			}
			if err != nil {
				cleanup()
				return err
			}
			if stdio {
				defer cleanup()
				return serveStdio(c, g, cl, srv.Endpoint)
			}
			endpoint, _ := cl.MCPEndpoint(srv.Endpoint)
			fmt.Fprintf(c.OutOrStdout(), "%s\n", endpoint)
			fmt.Fprintf(c.ErrOrStderr(), "MCP server %s runs in sandbox %s with tools %v; stop it with: agentbox mcp rm %s %s\n", name, id, srv.Tools, id, name)
			return nil
		},
	}
	// The create flags, but --name names the server here (issue 19's
	// contract), not the sandbox.
	createFS := pflag.NewFlagSet("create", pflag.ContinueOnError)
	f.register(createFS)
	createFS.VisitAll(func(fl *pflag.Flag) {
		if fl.Name != "name" {
			c.Flags().AddFlag(fl)
		}
	})
	c.Flags().StringVar(&name, "name", "", "the server's name, in its endpoint's path (required)")
	c.Flags().StringVar(&cwd, "cwd", "", "the server's working directory inside the sandbox")
	c.Flags().StringVar(&sandbox, "sandbox", "", "host it in this existing sandbox instead of a new one")
	c.Flags().BoolVar(&stdio, "stdio", false, "bridge the server to this command's stdin and stdout instead of printing its endpoint")
	return c
}

// waitMCPServer waits until server name of sandbox id runs, up to the
// daemon's start bound and a bit.
func waitMCPServer(ctx context.Context, cl *client.Client, id, name string) (*api.MCPServer, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		srv, err := cl.GetMCPServer(ctx, id, name)
		if err != nil {
			return nil, err
		}
		switch srv.State {
		case api.MCPServerRunning:
			return srv, nil
		case api.MCPServerStopped:
			return nil, fmt.Errorf("MCP server %s stopped: %s", name, srv.LastError)
		}
		if srv.Restarts > 0 || time.Now().After(deadline) {
			return nil, fmt.Errorf("MCP server %s did not start (%s): %s; its stderr:\n%s", name, srv.State, srv.LastError, srv.Stderr)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func newMCPLsCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "ls ID",
		Short: "List the MCP servers hosted in a sandbox",
		Args:  exactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			list, err := cl.ListMCPServers(c.Context(), args[0])
			if err != nil {
				return err
			}
			w := c.OutOrStdout()
			fmt.Fprintf(w, "%-16s %-11s %-8s %s\n", "NAME", "STATE", "RESTARTS", "ENDPOINT")
			for _, s := range list {
				fmt.Fprintf(w, "%-16s %-11s %-8d %s\n", s.Name, s.State, s.Restarts, s.Endpoint)
			}
			return nil
		},
	}
}

func newMCPRmCommand(g *globals) *cobra.Command {
	return &cobra.Command{
		Use:   "rm ID NAME",
		Short: "Stop an MCP server hosted in a sandbox",
		Args:  exactArgs(2),
		RunE: func(c *cobra.Command, args []string) error {
			cl, err := g.client()
			if err != nil {
				return err
			}
			return cl.StopMCPServer(c.Context(), args[0], args[1])
		},
	}
}
