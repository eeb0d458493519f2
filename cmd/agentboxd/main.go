// Command agentboxd is the agentbox daemon (`agentboxd serve`) and the
// benchmark (`agentboxd bench`), with every verb of the CLI besides. The
// agentbox CLI hands serve and bench to it, so that the CLI itself links
// none of the daemon's packages and starts in milliseconds.
package main

import (
	"os"
	"runtime"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/cli/benchcmd"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/mcpserver"
)

// The main goroutine keeps the main thread, so that no other goroutine
// runs there: a goroutine that changes its thread's namespaces or
// credentials and ends locked (drivers/gvisor's runsc start in a mount
// namespace of its own) ends its thread, and the main thread, whose
// namespaces /proc/self shows, cannot end.
func init() { runtime.LockOSThread() }

func main() {
	os.Exit(cli.Main(cli.Options{Serve: daemon.Run, Bench: benchcmd.New, MCPStdio: mcpserver.BridgeStdio}))
}
