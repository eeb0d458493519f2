package main

import (
	"fmt"
	"net"
	"os"

	"github.com/agentbox/agentbox/internal/guest/launcher"
)

// runLauncher is `agentbox-guest launcher`: the daemon's pre-forked
// launcher (internal/guest/launcher), serving the socket on fd 3 until
// the daemon closes it. It runs on the host, never in a sandbox.
func runLauncher() error {
	f := os.NewFile(3, "launcher")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("launcher socket on fd 3: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("fd 3 is not a unix socket")
	}
	return launcher.Serve(uc)
}
