package container

import (
	"context"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/cgroups/cgroupstest"
)

// A waiting init made while Cleanup runs is not a leftover: an earlier
// Cleanup listed the parent, then removed everything not in that list
// from a second listing, and killed a fresh init ("a pre-spawned
// sandbox init exited while waiting" at a daemon's start).
func TestCleanupKeepsInitsMadeMeanwhile(t *testing.T) {
	// The pre-spawning (which starts with the driver) makes an init's
	// cgroup after the cleanup's first look.
	m := &cgroupstest.Parent{Lists: [][]string{{"leftover"}, {"leftover", "init-test-7"}}}
	d := &Driver{cg: m, initPrefix: "init-test-"}
	removed, err := d.Cleanup(context.Background(), map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(m.Destroyed, "init-test-7") {
		t.Errorf("Cleanup destroyed a waiting init's cgroup made meanwhile (destroyed %v)", m.Destroyed)
	}
	if !slices.Contains(m.Destroyed, "leftover") {
		t.Errorf("Cleanup left a leftover cgroup (removed %v)", removed)
	}
}
