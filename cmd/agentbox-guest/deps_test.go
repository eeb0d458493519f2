package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestGuestImportsNothingFromTheDaemon guards the boundary: the guest
// agent runs inside every sandbox and must not carry the daemon's code
// (its state, keys, drivers or HTTP API) in with it.
func TestGuestImportsNothingFromTheDaemon(t *testing.T) {
	cmd := exec.Command("go", "list", "-deps", ".")
	cmd.Env = append(cmd.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/agentbox/agentbox/"
	allowed := []string{
		mod + "api",
		mod + "errdefs",
		mod + "internal/guest",
		mod + "internal/version",
	}
	var n int
	for _, pkg := range strings.Fields(string(out)) {
		if !strings.HasPrefix(pkg, mod) || strings.HasPrefix(pkg, mod+"cmd/agentbox-guest") {
			continue
		}
		n++
		ok := false
		for _, a := range allowed {
			if pkg == a || strings.HasPrefix(pkg, a+"/") {
				ok = true
			}
		}
		if !ok {
			t.Errorf("the guest agent imports %s; it may import only %v", pkg, allowed)
		}
	}
	if n == 0 {
		t.Fatal("go list found none of our packages: the check is broken")
	}
}
