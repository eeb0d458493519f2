package gvisor

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
	"github.com/agentbox/agentbox/internal/idrange"
)

// TestConformance runs the driver conformance suite on the gvisor tier:
// real runsc sandboxes on the busybox root of the build cache (root,
// scripts/install-runsc.sh and scripts/build-template.sh busybox; make
// test has all three).
func TestConformance(t *testing.T) {
	if _, err := os.Stat(runscPath()); err != nil {
		t.Fatal("no runsc: run scripts/install-runsc.sh (make test does)")
	}
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	layers := []string{drivertest.BusyboxRootfs(t, uidBase)}
	// Every sandbox in a uid range of its own (the daemon's default), and
	// in the one canonical range (uid_ranges = 0).
	for _, name := range []string{"own ranges", "canonical range"} {
		t.Run(name, func(t *testing.T) {
			var ids *idrange.Pool
			if name == "own ranges" {
				ids = drivertest.IDRanges(t, uidBase)
			}
			drivertest.Suite(t, drivertest.Config{
				New: func(t testing.TB) driver.Driver {
					d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, IDRanges: ids})
					if err != nil {
						t.Fatal(err)
					}
					t.Cleanup(func() { os.RemoveAll(d.viewsDir) })
					return d
				},
				Abilities:    []driver.Ability{driver.AbilityPause, driver.AbilityCheckpoint, driver.AbilityNetNSAtCreate},
				Layers:       layers,
				UIDBase:      uidBase,
				CgroupParent: parent,
			})
		})
	}
}
