package integration

import (
	"os"
	"slices"
	"strings"
)

// optInTiers are isolation tiers that the battery and the posture test
// run on only when AGENTBOX_TEST_TIERS names them (comma-separated), for a
// tier whose items do not all pass yet: microvm, which snapshots and
// forks with memory only (no snapshot of the files alone), and whose VMs
// boot in seconds under emulation (docs/microvm.md; its CI tests are in
// microvm_test.go and microvm_memory_test.go). Every
// other offered tier, gvisor included, runs the whole battery in every CI
// run.
var optInTiers = []string{"microvm"}

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
