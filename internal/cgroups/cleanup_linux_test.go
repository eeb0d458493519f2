package cgroups

import (
	"slices"
	"testing"
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
