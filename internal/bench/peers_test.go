package bench

import (
	"strings"
	"testing"
)

// The pool, pause, resume and fork lines are judged, and the table shows
// the peers' published creates beside our cold and pool p50.
func TestJudgeStateAndPeers(t *testing.T) {
	r := &Report{
		Results: []Result{
			{Name: "create/busybox", Group: GroupLifecycle, Summary: Summary{N: 10, P50: 30, P99: 40}},
			{Name: "create/busybox (pool)", Group: GroupLifecycle, Summary: Summary{N: 10, P50: 1.5}},
			{Name: "pause", Group: GroupState, Summary: Summary{N: 10, P50: 4}},
			{Name: "resume", Group: GroupState, Summary: Summary{N: 10, P50: 6}},
			{Name: "fork/1", Group: GroupState, Summary: Summary{N: 10, P50: 40}},
			{Name: "fork/10", Group: GroupState, Summary: Summary{N: 2, P50: 600}},
		},
	}
	r.Budgets = judge(r)
	got := map[string]bool{}
	for _, b := range r.Budgets {
		got[b.What] = b.Pass
	}
	want := map[string]bool{
		"create p50 from the warm pool":    true,
		"pause p50":                        true,
		"resume p50":                       false,
		"fork p50 (1 child)":               true,
		"fork p50 per child (10 children)": false,
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			t.Errorf("budget %q: pass=%v (present %v), want %v", k, g, ok, v)
		}
	}
	var sb strings.Builder
	r.WriteTable(&sb)
	for _, s := range []string{"== state", "== peers", "PandaStack", "179 ms p50, 203 ms p99", "5.0x ours", "100x ours"} {
		if !strings.Contains(sb.String(), s) {
			t.Errorf("table lacks %q:\n%s", s, sb.String())
		}
	}
}

func TestWriteMeasuredPeers(t *testing.T) {
	r := &Report{Results: []Result{
		{Name: "create-to-first-output", Group: GroupLifecycle, Summary: Summary{N: 5, P50: 40}},
		{Name: "baseline/bwrap", Group: GroupBaseline, Summary: Summary{N: 5, P50: 4, P99: 6}},
		{Name: "baseline/docker", Group: GroupBaseline, Summary: Summary{N: 5, P50: 800, P99: 900}},
	}}
	var b strings.Builder
	r.writeMeasuredPeers(&b)
	for _, want := range []string{"peers measured here", "bwrap", "10.00x", "docker", "0.05x"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("lacks %q:\n%s", want, b.String())
		}
	}
}
