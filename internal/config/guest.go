package config

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/agentbox/agentbox/errdefs"
)

// InstalledGuestBinary is the last place ResolveGuestBinary looks.
const InstalledGuestBinary = "/usr/local/lib/agentbox/agentbox-guest"

// ResolveGuestBinary returns the guest agent's path: GuestBinary when set;
// otherwise agentbox-guest next to the running executable, then
// InstalledGuestBinary. The error wraps errdefs.ErrFailedPrecondition and
// lists the places it looked.
func (c Config) ResolveGuestBinary() (string, error) {
	if c.GuestBinary != "" {
		if err := isExecutable(c.GuestBinary); err != nil {
			return "", errdefs.Precondition("guest_binary %s: %v; build it with `go build -o %s ./cmd/agentbox-guest` (CGO_ENABLED=0) or fix the path", c.GuestBinary, err, c.GuestBinary)
		}
		return c.GuestBinary, nil
	}
	var tried []string
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), "agentbox-guest")
		if isExecutable(p) == nil {
			return p, nil
		}
		tried = append(tried, p)
	}
	if isExecutable(InstalledGuestBinary) == nil {
		return InstalledGuestBinary, nil
	}
	tried = append(tried, InstalledGuestBinary)
	return "", errdefs.Precondition("guest agent binary not found (looked in %v); install agentbox-guest next to agentbox or set guest_binary in the config", tried)
}

func isExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("not a regular file")
	}
	if fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("not executable")
	}
	return nil
}
