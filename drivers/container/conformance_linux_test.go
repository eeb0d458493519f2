package container

import (
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/internal/idrange"
)

// TestConformance runs the driver conformance suite on the container tier:
// real namespaces, cgroups and seccomp on the busybox root of the build
// cache (root and scripts/build-template.sh busybox; make test has both),
// with every sandbox in a uid range of its own (as the daemon runs it by
// default) and in the one canonical range (uid_ranges = 0).
func TestConformance(t *testing.T) {
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	layers := []string{drivertest.BusyboxRootfs(t, uidBase)}
	for _, name := range []string{"own ranges", "canonical range"} {
		t.Run(name, func(t *testing.T) {
			var ids *idrange.Pool
			if name == "own ranges" {
				ids = drivertest.IDRanges(t, uidBase)
			}
			drivertest.Suite(t, drivertest.Config{
				New: func(t testing.TB) driver.Driver {
					// Two inits kept waiting, as the daemon does: the suite's
					// sandboxes come from them and, when they run out, from
					// inits started on the spot.
					d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, IDRanges: ids, Seccomp: true, Prespawn: 2})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { d.Close() })
					return d
				},
				Abilities:    []driver.Ability{driver.AbilityPause, driver.AbilityResize, driver.AbilityStandby, driver.AbilityStartNotifier},
				Layers:       layers,
				UIDBase:      uidBase,
				CgroupParent: parent,
			})
		})
	}
}
