package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Version is the pinned runsc version scripts/install-runsc.sh builds
// (the Go pseudo-version of gvisor.dev/gvisor).
const Version = "v0.0.0-20260905035102-160fafc42237"

// DefaultRunsc is where scripts/install-runsc.sh installs runsc.
const DefaultRunsc = "/usr/local/lib/agentbox/runsc"

// runscPath is the runsc binary: $AGENTBOX_RUNSC, else DefaultRunsc.
func runscPath() string {
	if p := os.Getenv("AGENTBOX_RUNSC"); p != "" {
		return p
	}
	return DefaultRunsc
}

// globalFlags are runsc's flags for every sandbox of this driver, with
// root its state directory. --ignore-cgroups: the driver makes the
// sandbox's cgroups and puts runsc's processes into them (only `runsc
// run` and `runsc restore` read a cgroup, the view's: runscCgroups).
// --overlay2=none: the root's writes go to the host overlay (the btrfs
// layer with its quota), not to a runsc-private overlay.
func globalFlags(root string) []string {
	return []string{
		"--root", root,
		"--ignore-cgroups",
		"--network=none",
		"--overlay2=none",
		"--host-uds=create",
	}
}

// runscCgroups turns flags (globalFlags') into those of a `runsc run` or
// `runsc restore` that reads the cgroup the spec's cgroupsPath names:
// the view's (view_linux.go), where it finds the sandbox's CPU count and
// memory limit for the Sentry (`runsc boot --cpu-num`, --total-memory).
func runscCgroups(flags []string) []string {
	out := make([]string, 0, len(flags))
	for _, f := range flags {
		if f != "--ignore-cgroups" {
			out = append(out, f)
		}
	}
	return out
}

// runsc runs one runsc command and returns its stdout; an error carries
// stderr.
func runsc(ctx context.Context, root string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, runscPath(), append(globalFlags(root), args...)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return stdout.Bytes(), fmt.Errorf("runsc %s: %v: %s", args[0], err, strings.TrimSpace(stderr.String()))
	}
	return stdout.Bytes(), nil
}

// check verifies that runsc is installed at the pinned version and can
// start a sandbox on this host (one trial `runsc do true`).
func check(tmp string) error {
	bin := runscPath()
	fix := "run scripts/install-runsc.sh (or `make install`) as root"
	if _, err := os.Stat(bin); err != nil {
		return errdefs.Precondition("gvisor: runsc not found at %s: %v; %s", bin, err, fix)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "--version").CombinedOutput()
	if err != nil {
		return errdefs.Precondition("gvisor: %s --version: %v: %s; %s", bin, err, bytes.TrimSpace(out), fix)
	}
	root, err := os.MkdirTemp(tmp, "runsc-check-")
	if err != nil {
		return fmt.Errorf("gvisor: %w", err)
	}
	defer os.RemoveAll(root)
	cmd := exec.CommandContext(ctx, bin, "--root", root, "--ignore-cgroups", "--network=none", "do", "true")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return errdefs.Precondition("gvisor: a trial `runsc do true` failed: %v: %s; a dynamically linked runsc fails here: %s",
			err, lastLines(out, 5), fix)
	}
	return nil
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
