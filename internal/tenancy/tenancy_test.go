package tenancy

import (
	"context"
	"errors"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

// The zero Scope, and a scope of the empty tenant, see nothing: a caller
// that built no scope fails closed.
func TestScopeSees(t *testing.T) {
	tests := []struct {
		name  string
		scope Scope
		sees  map[string]bool
	}{
		{"zero", Scope{}, map[string]bool{"acme": false, "": false}},
		{"only empty", Only(""), map[string]bool{"acme": false, "": false}},
		{"only acme", Only("acme"), map[string]bool{"acme": true, "beta": false, "": false}},
		{"all", AllTenants(), map[string]bool{"acme": true, "beta": true}},
		{"admin", Principal{Admin: true}.Scope(), map[string]bool{"acme": true, "beta": true}},
		{"tenant key", Principal{Tenant: "beta", KeyID: "k"}.Scope(), map[string]bool{"acme": false, "beta": true}},
		{"principal without tenant", Principal{}.Scope(), map[string]bool{"acme": false, "": false}},
	}
	for _, tt := range tests {
		for owner, want := range tt.sees {
			if got := tt.scope.Sees(owner); got != want {
				t.Errorf("%s (%v).Sees(%q) = %v, want %v", tt.name, tt.scope, owner, got, want)
			}
		}
	}
	if tenant, limited := (Scope{}).Tenant(); !limited || tenant != "" {
		t.Errorf("the zero Scope's Tenant() = %q, %v: a store must get a condition nothing matches", tenant, limited)
	}
	if _, limited := AllTenants().Tenant(); limited {
		t.Error("AllTenants().Tenant() says limited")
	}
}

func TestFromFailsClosed(t *testing.T) {
	if _, err := From(context.Background()); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Fatalf("From(no principal) = %v, want permission denied", err)
	}
	p, err := From(Admin(context.Background()))
	if err != nil || !p.Admin {
		t.Fatalf("From(Admin(ctx)) = %+v, %v", p, err)
	}
}
