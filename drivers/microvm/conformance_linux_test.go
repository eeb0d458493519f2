package microvm

import (
	"testing"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// TestConformance runs the driver conformance suite on the microvm tier:
// real QEMU VMs (under emulation where the host has no /dev/kvm) on the
// busybox root of the build cache (root, scripts/install-deps.sh and
// scripts/build-template.sh busybox; make test has all three). Of the
// optional abilities the tier has pause (QEMU frozen in its cgroups),
// checkpoint (QEMU's migration to a file, checkpoint_linux.go) and
// netns-at-create; no resize, standby or start-notifier: the suite checks
// that it declares no other.
func TestConformance(t *testing.T) {
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	// Each sandbox's QEMU as a uid of its own range, as the daemon runs it.
	ids := drivertest.IDRanges(t, uidBase)
	drivertest.Suite(t, drivertest.Config{
		New: func(t testing.TB) driver.Driver {
			d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, IDRanges: ids})
			if err != nil {
				t.Fatal(err)
			}
			return d
		},
		Abilities:    []driver.Ability{driver.AbilityPause, driver.AbilityCheckpoint, driver.AbilityNetNSAtCreate},
		Layers:       []string{drivertest.BusyboxRootfs(t, uidBase)},
		UIDBase:      uidBase,
		CgroupParent: parent,
		// The writable layer is an ext4 disk image (docs/microvm.md).
		WritableDisk: true,
	})
}
