package kube

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A Lease expires a duration after the gateway saw it renewed, by the
// gateway's clock: a node whose clock is an hour behind (or ahead) is live
// while it renews, and down once it stops.
func TestLeaseExpiryIgnoresClockSkew(t *testing.T) {
	node := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "n2a"},
		"spec": map[string]any{"url": "https://198.19.250.2:7423"}}}
	lease := func(renew time.Time) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"metadata": map[string]any{"name": LeaseName("n2a"), "labels": map[string]any{NodeIDLabel: "n2a"}},
			"spec":     map[string]any{"renewTime": renew.Format(microTime), "leaseDurationSeconds": int64(40)}}}
	}
	now := time.Date(2026, 12, 7, 9, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{-time.Hour, 0, time.Hour} {
		seen := renewals{}
		nodeClock := now.Add(skew)
		for i := 0; i < 5; i++ { // renewed every 10 s
			at := now.Add(time.Duration(i) * 10 * time.Second)
			ms := seen.members([]any{node}, []any{lease(nodeClock.Add(time.Duration(i) * 10 * time.Second))}, at)
			if len(ms) != 1 || ms[0].Down != "" {
				t.Fatalf("skew %s, renewal %d: %+v, want live", skew, i, ms)
			}
		}
		last := lease(nodeClock.Add(40 * time.Second))
		if ms := seen.members([]any{node}, []any{last}, now.Add(75*time.Second)); ms[0].Down != "" {
			t.Errorf("skew %s: 35 s after the last renewal: %+v, want live", skew, ms)
		}
		if ms := seen.members([]any{node}, []any{last}, now.Add(81*time.Second)); ms[0].Down == "" {
			t.Errorf("skew %s: 41 s after the last renewal: live, want down", skew)
		}
	}
	if ms := (renewals{}).members([]any{node}, nil, now); len(ms) != 1 || ms[0].Down == "" {
		t.Errorf("no Lease: %+v, want down", ms)
	}
}
