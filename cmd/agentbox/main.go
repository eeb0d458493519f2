// Command agentbox is both the daemon (`agentbox serve`) and its CLI.
package main

import (
	"os"

	"github.com/agentbox/agentbox/internal/cli"
	"github.com/agentbox/agentbox/internal/daemon"
)

func main() {
	os.Exit(cli.Main(daemon.Run))
}
