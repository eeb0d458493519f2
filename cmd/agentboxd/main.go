// Command agentboxd is the agentbox daemon (`agentboxd serve`) and the
// benchmark (`agentboxd bench`), with every verb of the CLI besides. The
// agentbox CLI hands serve and bench to it, so that the CLI itself links
// none of the daemon's packages and starts in milliseconds.
package main

import (
	"os"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/cli/benchcmd"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/mcpserver"
)

func main() {
	os.Exit(cli.Main(cli.Options{Serve: daemon.Run, Bench: benchcmd.New, MCPStdio: mcpserver.BridgeStdio}))
}
