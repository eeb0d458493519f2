package filter

import (
	"slices"
	"testing"
)

// TestAllowing: a syscall named to ProgramAllowing leaves the
// deny list for the allow list, and nothing else changes.
func TestAllowing(t *testing.T) {
	base, err := buildPolicy()
	if err != nil {
		t.Fatal(err)
	}
	with, err := buildPolicy("syslog")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(base.rules.Denied, "syslog") || slices.Contains(base.rules.Allowed, "syslog") {
		t.Fatalf("syslog is not denied by default: %v", base.rules.Denied)
	}
	if slices.Contains(with.rules.Denied, "syslog") || !slices.Contains(with.rules.Allowed, "syslog") {
		t.Errorf("allowing syslog: denied %v", with.rules.Denied)
	}
	if len(with.rules.Denied) != len(base.rules.Denied)-1 || len(with.rules.Allowed) != len(base.rules.Allowed)+1 {
		t.Errorf("allowing syslog changed more: denied %d -> %d, allowed %d -> %d",
			len(base.rules.Denied), len(with.rules.Denied), len(base.rules.Allowed), len(with.rules.Allowed))
	}
	if _, err := program([]string{"syslog"}); err != nil {
		t.Errorf("assembling: %v", err)
	}
}
