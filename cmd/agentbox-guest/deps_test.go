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
	// Every sandbox's start runs the guest's package initialisers: the
	// seccomp assembler's (every architecture's syscall tables, Docker's
	// profile) cost each start about 0.25 ms of CPU, and the daemon sends
	// the filter assembled (internal/guest/harden/filter).
	for _, pkg := range strings.Fields(string(out)) {
		for _, heavy := range []string{"github.com/elastic/go-seccomp-bpf", "github.com/moby/profiles", mod + "internal/guest/harden/filter"} {
			if pkg == heavy || strings.HasPrefix(pkg, heavy+"/") {
				t.Errorf("the guest agent links %s, which only the daemon needs", pkg)
			}
		}
	}
}
