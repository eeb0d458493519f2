package gvisor

import (
	"os"
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
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
	drivertest.Suite(t, drivertest.Config{
		New: func(t testing.TB) driver.Driver {
			d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Abilities:    []driver.Ability{driver.AbilityPause, driver.AbilityCheckpoint, driver.AbilityNetNSAtCreate},
		Layers:       []string{drivertest.BusyboxRootfs(t, uidBase)},
		UIDBase:      uidBase,
		CgroupParent: parent,
	})
}
