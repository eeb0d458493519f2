// Package cli is agentbox's command line: `agentbox serve` starts the
// daemon, every other verb is a thin client of the HTTP API through the Go
// SDK (package client). Errors print as `agentbox: <message>` on stderr
// and exit 1, usage errors exit 2, and exec/run exit with the command's
// own code.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/version"
)

// ServeFunc runs the daemon until ctx ends.
type ServeFunc func(ctx context.Context, configPath string) error

// ExitError makes the process exit with Code. Its message, when not empty,
// is printed as `agentbox: <message>` first.
type ExitError struct {
	Code    int
	Message string
}

func (e *ExitError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("exit status %d", e.Code)
	}
	return e.Message
}

// usageError is a mistake in the command line: exit status 2.
type usageError struct{ err error }

func (e usageError) Error() string { return e.err.Error() }
func (e usageError) Unwrap() error { return e.err }

func usageErrorf(format string, args ...any) error {
	return usageError{fmt.Errorf(format, args...)}
}

// Options says how a binary runs the verbs whose code is not in package
// cli. agentboxd (cmd/agentboxd) links the daemon and the benchmark;
// agentbox (cmd/agentbox), the CLI users run many times a minute, links
// neither, so that it starts in milliseconds, and hands serve and bench
// to agentboxd.
type Options struct {
	// Serve runs the daemon for `serve`.
	Serve ServeFunc
	// Bench makes the bench verb.
	Bench func(Env) *cobra.Command
	// MCPStdio bridges stdin and stdout to an MCP endpoint (agentbox mcp,
	// mcp host --stdio): mcpserver.BridgeStdio.
	MCPStdio func(ctx context.Context, endpoint string, hc *http.Client, in io.ReadCloser, out io.WriteCloser) error
	// Daemon, when set, is the binary that serve and bench are handed to
	// (exec'd in this process, with the same arguments) where Serve or
	// Bench is nil: a bare name is looked for next to this executable,
	// then on PATH.
	Daemon string
}

// Env is what a verb defined outside package cli gets of the root
// command: its --host and a client for it.
type Env interface {
	Host() string
	Client() (*client.Client, error)
}

// Main runs the command line with os.Args and returns the exit status.
func Main(o Options) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRoot(o)
	return Execute(ctx, root, os.Args[1:], os.Stderr)
}

// Execute runs root with args and turns its error into an exit status,
// printing the message on stderr.
func Execute(ctx context.Context, root *cobra.Command, args []string, stderr io.Writer) int {
	root.SetArgs(args)
	err := root.ExecuteContext(ctx)
	return exitStatus(err, stderr)
}

func exitStatus(err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		if ee.Message != "" {
			fmt.Fprintf(stderr, "agentbox: %s\n", ee.Message)
		}
		return ee.Code
	}
	if errors.Is(err, context.Canceled) {
		fmt.Fprintln(stderr, "agentbox: interrupted")
		return 130
	}
	fmt.Fprintf(stderr, "agentbox: %s\n", err)
	var ue usageError
	if errors.As(err, &ue) || isCobraUsageError(err) {
		return 2
	}
	return 1
}

// isCobraUsageError recognises the errors cobra returns for a command
// line it could not parse, which carry no type of their own.
func isCobraUsageError(err error) bool {
	msg := err.Error()
	for _, p := range []string{"unknown command", "unknown flag", "unknown shorthand flag", "required flag", "invalid argument", "flag needs an argument", "accepts ", "requires at least", "bad flag syntax"} {
		if strings.HasPrefix(msg, p) {
			return true
		}
	}
	return false
}

// globals are the flags every client command shares.
type globals struct {
	host string
	opts Options
}

func (g *globals) Host() string { return g.host }

func (g *globals) Client() (*client.Client, error) { return g.client() }

func (g *globals) client() (*client.Client, error) {
	var opts []client.Option
	if g.host != "" {
		opts = append(opts, client.WithHost(g.host))
	}
	return client.New(opts...)
}

// NewRootCommand returns the `agentbox` command with every verb. serve runs
// the daemon for `agentbox serve`; there is no bench verb.
func NewRootCommand(serve ServeFunc) *cobra.Command {
	return NewRoot(Options{Serve: serve})
}

// NewRoot returns the `agentbox` command with every verb, serve and bench
// as o says.
func NewRoot(o Options) *cobra.Command {
	g := &globals{opts: o}
	root := &cobra.Command{
		Use:   "agentbox",
		Short: "Disposable, isolated Linux sandboxes for AI agents",
		Long: `agentbox runs a daemon (agentbox serve) that gives AI agents disposable,
isolated Linux sandboxes, and is the command line client of that daemon.

The client finds the daemon through --host or AGENTBOX_HOST
(unix:///run/agentbox/agentbox.sock, http://127.0.0.1:7423 or host:port) and
authenticates with AGENTBOX_API_KEY; run as root on the daemon's host, it
uses the local socket and the admin key by default.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	// A sandbox's name or id prefix works wherever its id does (resolve.go).
	root.PersistentPreRunE = func(c *cobra.Command, args []string) error {
		return resolveSandboxArgs(c, g, args)
	}
	root.Version = version.Version
	root.SetVersionTemplate("agentbox {{.Version}}\n")
	root.PersistentFlags().StringVar(&g.host, "host", "", "daemon address (default $AGENTBOX_HOST, else the local daemon)")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		if c.Name() == "exec" || c.Name() == "run" {
			// Most likely the command's own flags, given without --.
			return usageError{fmt.Errorf("%w; put -- before the command and its flags: %s", err, c.UseLine())}
		}
		return usageError{fmt.Errorf("%w (see %s --help)", err, c.CommandPath())}
	})
	root.CompletionOptions.DisableDefaultCmd = true

	root.AddCommand(
		newServeCommand(g, o),
		newCreateCommand(g),
		newExecCommand(g),
		newRunCommand(g),
		newCpCommand(g),
		newLsCommand(g),
		newInspectCommand(g),
		newRmCommand(g),
		newTTLCommand(g),
		newTemplateCommand(g),
		newVersionCommand(g), newInfoCommand(g),
		newShellCommand(g), newAttachCommand(g), newPsCommand(g), newLogsCommand(g), newKillCommand(g),
	)
	// State (docs/state.md).
	root.AddCommand(newPauseCommand(g), newResumeCommand(g), newSnapshotCommand(g), newForkCommand(g), newResetCommand(g))
	// Keys and tenants (docs/SECURITY.md).
	root.AddCommand(newKeyCommand(g), newTenantCommand(g))
	// Network (docs/network.md).
	root.AddCommand(newURLCommand(g))
	root.AddCommand(newEgressCommand(g))
	// Warm pools (docs/PERFORMANCE.md).
	root.AddCommand(newPoolsCommand(g))
	// MCP (docs/mcp.md).
	root.AddCommand(newMCPCommand(g))
	// The code interpreter (docs/interpreter.md).
	root.AddCommand(newCodeCommand(g))
	// The desktop for computer-use agents (docs/desktop.md).
	root.AddCommand(newDesktopCommand(g))
	// Usage and events (docs/observability.md).
	root.AddCommand(newStatsCommand(g), newEventsCommand(g))
	// Fleets (docs/cluster.md).
	root.AddCommand(newFleetCommand(g))
	// The benchmark (docs/PERFORMANCE.md).
	switch {
	case o.Bench != nil:
		root.AddCommand(o.Bench(g))
	case o.Daemon != "":
		root.AddCommand(forwardCommand(g, o.Daemon, "bench", "Measure a running daemon against the performance budget"))
	}
	return root
}

// ExactArgs is cobra.ExactArgs with a usage error that shows the usage
// line, for verbs defined outside package cli.
func ExactArgs(n int) cobra.PositionalArgs { return exactArgs(n) }

// UsageErrorf is a mistake in the command line (exit status 2).
func UsageErrorf(format string, args ...any) error { return usageErrorf(format, args...) }

// exactArgs is cobra.ExactArgs with a usage error that shows the usage line.
func exactArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s wants %d argument(s), got %d; usage: %s", c.CommandPath(), n, len(args), c.UseLine())
		}
		return nil
	}
}

func minArgs(n int) cobra.PositionalArgs {
	return func(c *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s wants at least %d argument(s), got %d; usage: %s", c.CommandPath(), n, len(args), c.UseLine())
		}
		return nil
	}
}

func newServeCommand(g *globals, o Options) *cobra.Command {
	if o.Serve == nil && o.Daemon != "" {
		return forwardCommand(g, o.Daemon, "serve", "Run the agentbox daemon")
	}
	serve := o.Serve
	var configPath string
	c := &cobra.Command{
		Use:   "serve [--config PATH]",
		Short: "Run the agentbox daemon",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if serve == nil {
				return errors.New("this binary was built without the daemon")
			}
			return serve(c.Context(), configPath)
		},
	}
	c.Flags().StringVar(&configPath, "config", "", "config file (default /etc/agentbox/config.toml; a missing file means the defaults)")
	return c
}
