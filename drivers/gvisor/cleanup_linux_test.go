package gvisor

import (
	"context"
	"slices"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/cgroups"
)

// fakeParent is a cgroup parent holding a leftover, a kept sandbox and a
// waiting init of the container tier.
type fakeParent struct {
	cgroups.Manager
	destroyed []string
}

func (m *fakeParent) Version() int { return 2 }

func (m *fakeParent) List() ([]string, error) {
	return []string{"leftover", "kept", driver.PrespawnCgroupPrefix + "1a2b3c4d-1"}, nil
}

func (m *fakeParent) Open(name string) (cgroups.Cgroup, error) {
	return destroyRecorder{name: name, m: m}, nil
}

type destroyRecorder struct {
	cgroups.Cgroup
	name string
	m    *fakeParent
}

func (c destroyRecorder) Destroy() error {
	c.m.destroyed = append(c.m.destroyed, c.name)
	return nil
}

// The cgroup parent is shared: this tier's start-up cleanup leaves the
// container tier's waiting inits alone (it killed them at every daemon
// start: "a pre-spawned sandbox init exited while waiting").
func TestCleanupLeavesWaitingInits(t *testing.T) {
	m := &fakeParent{}
	d := &Driver{cg: m}
	d.opts.RunRoot = t.TempDir()
	if _, err := d.Cleanup(context.Background(), map[string]bool{"kept": true}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(m.destroyed, []string{"leftover"}) {
		t.Errorf("Cleanup destroyed %v, want only the leftover", m.destroyed)
	}
}
