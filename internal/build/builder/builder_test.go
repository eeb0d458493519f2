package builder

import (
	"testing"

	"github.com/agentbox/agentbox/internal/build"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// TestKey: a step's cache key depends on its scope (tenants never share
// layers), its parent, the step and the env it runs with, and nothing else.
func TestKey(t *testing.T) {
	b := &Builder{}
	key := func(scope, parent, run string, env map[string]string) string {
		t.Helper()
		k, _, err := b.key(scope, &state{parent: parent, env: env}, &build.Step{Kind: build.KindRun, Run: run}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if len(k) != 32 {
			t.Fatalf("key %q is not 32 hex digits", k)
		}
		return k
	}
	base := key("", "p", "make", map[string]string{"A": "1"})
	if again := key("", "p", "make", map[string]string{"A": "1"}); again != base {
		t.Errorf("the same step has two keys: %s %s", base, again)
	}
	for what, k := range map[string]string{
		"tenant":  key("tenant a", "p", "make", map[string]string{"A": "1"}),
		"tenant2": key("tenant b", "p", "make", map[string]string{"A": "1"}),
		"parent":  key("", "q", "make", map[string]string{"A": "1"}),
		"step":    key("", "p", "make all", map[string]string{"A": "1"}),
		"env":     key("", "p", "make", map[string]string{"A": "2"}),
	} {
		if k == base {
			t.Errorf("changing the %s keeps the key", what)
		}
	}
	if cacheScope(tenancy.Principal{Admin: true}) != "" || cacheScope(tenancy.Principal{Tenant: "a"}) != "tenant a" {
		t.Error("cache scopes: the admin's must be empty, a tenant's its name")
	}
}
