package integration

import (
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// TestGvisorCreateFromPool measures create on the gvisor tier served from
// a warm pool of pre-started runsc sandboxes ([[pool]] isolation =
// "gvisor"): the daemon restarts with a pool of 2 busybox sandboxes, and
// each of 20 samples waits for the pool to be full (refills untimed),
// creates, checks the pool served it and that the sandbox is its own
// (id, hostname), and destroys it. p50 and p99 are logged; docs/gvisor.md
// has the figures. A cold gvisor create is TestGvisorCreateLatency.
func TestGvisorCreateFromPool(t *testing.T) {
	needGvisor(t)
	first := true
	ds := createsFromPool(t, "gvisor", 2, 20, 60*time.Second, func(t *testing.T, sb *api.Sandbox) {
		if first {
			first = false
			if out := mustSh(t, sb.ID, "hostname"); out != "sbx-"+sb.ID {
				t.Errorf("pool sandbox %s has hostname %q", sb.ID, out)
			}
		}
	})
	p99 := ds[(len(ds)*99+99)/100-1]
	t.Logf("gvisor create from a warm pool (%d, busybox): p50 %v, p99 %v, min %v", len(ds), ds[len(ds)/2], p99, ds[0])
}
