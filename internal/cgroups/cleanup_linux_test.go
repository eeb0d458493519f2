package cgroups

import (
	"fmt"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

func TestRemoveExcept(t *testing.T) {
	m := testV1(t)
	for _, n := range []string{"keep1", "gone1", "gone2"} {
		if _, err := m.Create(n, Resources{Pids: 16}); err != nil {
			t.Fatal(err)
		}
	}
	removed, err := RemoveExcept(m, map[string]bool{"keep1": true})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(removed)
	if want := []string{"cgroup gone1", "cgroup gone2"}; !slices.Equal(removed, want) {
		t.Fatalf("removed %v, want %v", removed, want)
	}
	if names, _ := m.List(); !slices.Equal(names, []string{"keep1"}) {
		t.Fatalf("left %v, want [keep1]", names)
	}
}

// racingManager's cgroups are removed by someone else (their owner, a
// pre-spawned init's driver) while RemoveExcept kills them: Destroy
// fails on files gone meanwhile.
type racingManager struct{ Manager }

func (m racingManager) Open(n string) (Cgroup, error) {
	cg, err := m.Manager.Open(n)
	if err != nil {
		return nil, err
	}
	return racingCgroup{cg}, nil
}

type racingCgroup struct{ Cgroup }

func (c racingCgroup) Destroy() error {
	_ = c.Cgroup.Destroy()
	return fmt.Errorf("killing cgroup %s: thawing: %w", c.Name(), errdefs.ErrNotFound)
}

// TestRemoveExceptGoneMeanwhile: a cgroup that its owner removes while
// RemoveExcept kills it is gone, which is no error; one that stays is.
func TestRemoveExceptGoneMeanwhile(t *testing.T) {
	m := testV1(t)
	if _, err := m.Create("racing", Resources{Pids: 16}); err != nil {
		t.Fatal(err)
	}
	if removed, err := RemoveExcept(racingManager{m}, nil); err != nil || len(removed) != 0 {
		t.Fatalf("RemoveExcept = %v, %v; want nothing removed by it and no error", removed, err)
	}
	if names, _ := m.List(); len(names) != 0 {
		t.Fatalf("left %v", names)
	}
}
