package container

import (
	"context"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/internal/cgroups"
)

// growingList is a cgroup parent in which a pre-spawned init's cgroup
// appears after the first look, as when the pre-spawning (which starts
// with the driver) makes one while the daemon's start-up cleanup runs.
type growingList struct {
	cgroups.Manager
	lists     int
	destroyed []string
}

func (m *growingList) List() ([]string, error) {
	m.lists++
	if m.lists == 1 {
		return []string{"leftover"}, nil
	}
	return []string{"leftover", "init-test-7"}, nil
}

func (m *growingList) Open(name string) (cgroups.Cgroup, error) {
	return destroyRecorder{name: name, m: m}, nil
}

type destroyRecorder struct {
	cgroups.Cgroup
	name string
	m    *growingList
}

func (c destroyRecorder) Destroy() error {
	c.m.destroyed = append(c.m.destroyed, c.name)
	return nil
}

// A waiting init made while Cleanup runs is not a leftover: an earlier
// Cleanup listed the parent, then removed everything not in that list
// from a second listing, and killed a fresh init ("a pre-spawned
// sandbox init exited while waiting" at a daemon's start).
func TestCleanupKeepsInitsMadeMeanwhile(t *testing.T) {
	m := &growingList{}
	d := &Driver{cg: m, initPrefix: "init-test-"}
	// The first look is taken before the init is made.
	if names, _ := m.List(); slices.Contains(names, "init-test-7") {
		t.Fatal("the fake lists the init at once")
	}
	m.lists = 0
	removed, err := d.Cleanup(context.Background(), map[string]bool{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(m.destroyed, "init-test-7") {
		t.Errorf("Cleanup destroyed a waiting init's cgroup made meanwhile (destroyed %v)", m.destroyed)
	}
	if !slices.Contains(m.destroyed, "leftover") {
		t.Errorf("Cleanup left a leftover cgroup (removed %v)", removed)
	}
}
