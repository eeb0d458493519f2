package integration

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"
)

// optInTiers are isolation tiers that the tests of other tiers' lists
// (testTiers) run on only when AGENTBOX_TEST_TIERS names them
// (comma-separated): microvm, whose VMs boot in seconds under emulation
// (docs/microvm.md; its own CI tests are in microvm_test.go and
// microvm_memory_test.go). The hostile battery and the posture test run
// on it in every CI run too, but only the items of ciItems (about 30 s
// more on this 2-core machine under TCG: 12 s for the battery's three
// VMs, 14 s of items, 5 s of posture); `make battery-microvm` runs the
// whole battery there (about 5 minutes). Every other offered tier, gvisor included, runs the
// whole battery in every CI run.
var optInTiers = []string{"microvm"}

// ciItems are the battery items (and "posture") an opt-in tier runs in
// every CI run when AGENTBOX_TEST_TIERS does not name it: one or two of
// each kind, judged the tier's way (battery_microvm_test.go) where the
// container tier's verdicts read host state a VM does not have.
var ciItems = map[string][]string{
	"microvm": {
		"01_fork_thread_bomb",  // a limit inside, QEMU's cgroup on the host
		"12_siblings",          // network: no neighbour reachable
		"17_modules_sockets",   // the guest's seccomp filter
		"20_host_proc",         // the guest's /proc masked, QEMU's posture
		"21_proc_sys_writes",   // /proc/sys read-only in the guest
		"29_file_api_symlinks", // the file API through the agent
		"posture",              // QEMU's posture, read on the host
	},
}

// batteryRunTiers lists the tiers the battery and the posture test run
// on: testTiers' and, unless AGENTBOX_TEST_TIERS is set, the opt-in
// tiers offered that have ciItems (only those items run there:
// runsOn).
func batteryRunTiers(t *testing.T) []string {
	t.Helper()
	h, err := env.client.Health(context.Background())
	if err != nil {
		t.Fatalf("health: %v", err)
	}
	tiers := testTiers(h.Drivers)
	if os.Getenv("AGENTBOX_TEST_TIERS") == "" {
		for _, tier := range h.Drivers {
			if len(ciItems[tier]) > 0 && !slices.Contains(tiers, tier) {
				tiers = append(tiers, tier)
			}
		}
	}
	return tiers
}

// runsOn says whether battery item runs on tier in this run: every item
// on a tier testTiers gives, the ciItems of an opt-in tier otherwise.
func runsOn(item, tier string) bool {
	if !slices.Contains(optInTiers, tier) || os.Getenv("AGENTBOX_TEST_TIERS") != "" {
		return true
	}
	return slices.Contains(ciItems[tier], item)
}

// testTiers filters the daemon's tiers to those the battery runs on: with
// AGENTBOX_TEST_TIERS set, exactly the tiers it names (of those offered);
// without, every tier offered but the opt-in ones.
func testTiers(have []string) []string {
	set := os.Getenv("AGENTBOX_TEST_TIERS")
	want := strings.Split(set, ",")
	var out []string
	for _, t := range have {
		if set != "" && !slices.Contains(want, t) || set == "" && slices.Contains(optInTiers, t) {
			continue
		}
		out = append(out, t)
	}
	return out
}
