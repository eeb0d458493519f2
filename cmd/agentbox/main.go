// Command agentbox is the CLI of the agentbox daemon. It links no package
// of the daemon: `agentbox serve` and `agentbox bench` exec agentboxd
// (cmd/agentboxd), installed beside it.
package main

import (
	"os"

	"github.com/agentbox/agentbox/internal/cli"
)

func main() {
	os.Exit(cli.Main(cli.Options{Daemon: "agentboxd"}))
}
