package container

import (
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// TestConformance runs the driver conformance suite on the container tier:
// real namespaces, cgroups and seccomp on the busybox root of the build
// cache (root and scripts/build-template.sh busybox; make test has both).
func TestConformance(t *testing.T) {
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	drivertest.Suite(t, drivertest.Config{
		New: func(t testing.TB) driver.Driver {
			// Two inits kept waiting, as the daemon does: the suite's
			// sandboxes come from them and, when they run out, from inits
			// started on the spot.
			d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true, Prespawn: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { d.Close() })
			return d
		},
		Abilities:    []driver.Ability{driver.AbilityPause, driver.AbilityResize, driver.AbilityStandby, driver.AbilityStartNotifier},
		Layers:       []string{drivertest.BusyboxRootfs(t, uidBase)},
		UIDBase:      uidBase,
		CgroupParent: parent,
	})
}
