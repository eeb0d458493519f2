package integration

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/drivers/microvm"
)

// TestMicrovmCreateFromPool: a warm pool of booted microvm sandboxes
// ([[pool]] isolation = "microvm") serves creates: the daemon restarts
// with a pool of one busybox VM, and each of 5 samples waits for the pool
// to be full (a boot, untimed), creates, checks the pool served it and
// that the sandbox is its own (hostname) and runs the guest kernel, and
// destroys it. p50 is logged; docs/microvm.md has the figures (a cold
// create under emulation takes seconds).
func TestMicrovmCreateFromPool(t *testing.T) {
	needMicrovm(t)
	ds := createsFromPool(t, "microvm", 1, 5, 3*time.Minute, func(t *testing.T, sb *api.Sandbox) {
		if out := mustSh(t, sb.ID, "hostname; uname -r"); out != "sbx-"+sb.ID+"\n"+microvm.KernelRelease {
			t.Errorf("pool sandbox %s: %q, want its hostname and the guest kernel", sb.ID, out)
		}
	})
	t.Logf("microvm create from a warm pool (%d, busybox): p50 %v, max %v, min %v", len(ds), ds[len(ds)/2], ds[len(ds)-1], ds[0])
}
