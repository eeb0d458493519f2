package integration

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/bench"
)

// TestBenchFleet runs `agentbox bench`'s fleet lines (internal/bench/fleet.go)
// against the test daemon made a fleet node (node_id, the fleet key, a
// loopback listener): create and exec `true` on the node directly and
// through an in-process gateway, and the two budget lines of issue 21
// (+1 ms create p50, +0.5 ms exec p50). It fails when a line has no
// samples or errors; the budget lines are logged, not judged (a shared
// machine's noise is not the gateway's).
func TestBenchFleet(t *testing.T) {
	dir := t.TempDir()
	const secret = "integration-bench-fleet-0123456789abcdef"
	keyFile, addr := restartAsFleetNode(t, dir, "n4b", secret)

	n := 30
	if testing.Short() {
		n = 5
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var progress bytes.Buffer
	rep, err := bench.Run(ctx, bench.Options{
		Client: env.client, N: n, Only: regexp.MustCompile(`^fleet/`), Templates: []string{"busybox"},
		Fleet:    bench.FleetOptions{URL: "http://" + addr, Key: env.key, KeyFile: keyFile},
		Progress: &progress,
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	rep.WriteTable(&table)
	t.Logf("%s\n%s", progress.String(), table.String())
	for _, name := range []string{"fleet/create direct", "fleet/create via gateway", "fleet/exec true direct", "fleet/exec true via gateway"} {
		res := rep.Find(name)
		if res == nil || res.N != n || res.Errors != 0 {
			t.Errorf("%s: %+v", name, res)
		}
	}
	budgets := 0
	for _, b := range rep.Budgets {
		if strings.Contains(b.What, "fleet gateway") {
			budgets++
		}
	}
	if budgets != 2 {
		t.Errorf("%d fleet budget lines, want 2: %+v", budgets, rep.Budgets)
	}
}
