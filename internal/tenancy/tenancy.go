// Package tenancy says whom a piece of work acts for: the principal a
// context carries. The API server's authentication sets it on every
// request from the API key; the daemon's own work (recovery, reapers,
// warm pools, tools on the host) sets the admin principal explicitly with
// Admin. Nothing defaults: a context without a principal is refused by
// every tenant-scoped entry point (From returns an error), so a caller
// that forgot to say whom it acts for fails closed instead of acting as
// the admin.
package tenancy

import (
	"context"
	"regexp"

	"github.com/agentbox/agentbox/errdefs"
)

// Principal is who a request acts for: a tenant, or the admin (who sees
// every tenant's resources and makes public templates).
type Principal struct {
	KeyID  string // the API key's id; empty for the daemon's own work
	Tenant string
	Admin  bool
}

type key struct{}

// With returns ctx carrying p.
func With(ctx context.Context, p Principal) context.Context {
	return context.WithValue(ctx, key{}, p)
}

// Admin returns ctx carrying the admin principal: for the daemon's own
// work and host tools, which act for no tenant. Say it where it happens;
// no context is the admin by default.
func Admin(ctx context.Context) context.Context {
	return With(ctx, Principal{Admin: true})
}

// ErrNoPrincipal is what From answers for a context without a principal:
// a permission-denied error, so that the caller's mistake can never
// widen what it sees.
var ErrNoPrincipal = errdefs.New(errdefs.ErrPermissionDenied, "no principal: this work does not say whom it acts for, so it is refused (set one with tenancy.With or tenancy.Admin)")

// From returns the principal ctx carries, or ErrNoPrincipal.
func From(ctx context.Context) (Principal, error) {
	if p, ok := ctx.Value(key{}).(Principal); ok {
		return p, nil
	}
	return Principal{}, ErrNoPrincipal
}

// Scope is whose sandboxes and snapshots a call may see: one tenant's, or
// every tenant's (the admin's, and the daemon's own work). The zero Scope
// sees nothing, so a caller that built none fails closed; there is no
// string that means "every tenant".
type Scope struct {
	tenant string
	all    bool
}

// AllTenants is the scope of the admin and of the daemon's own work
// (recovery, reapers, pausing to disk): every tenant's resources.
func AllTenants() Scope { return Scope{all: true} }

// Only is the scope of one tenant's resources; Only("") sees nothing.
func Only(tenant string) Scope { return Scope{tenant: tenant} }

// Scope is what p may see: every tenant's resources for the admin, its
// own tenant's otherwise.
func (p Principal) Scope() Scope {
	if p.Admin {
		return AllTenants()
	}
	return Only(p.Tenant)
}

// Sees reports whether a resource owned by tenant is in the scope.
func (s Scope) Sees(tenant string) bool {
	return s.all || (s.tenant != "" && s.tenant == tenant)
}

// Tenant returns the one tenant the scope is limited to, and false for
// AllTenants. A store turns it into a query's tenant condition; the zero
// Scope gives ("", true), a condition nothing matches (records always
// name their tenant).
func (s Scope) Tenant() (tenant string, limited bool) {
	return s.tenant, !s.all
}

// String names the scope in logs and errors.
func (s Scope) String() string {
	switch {
	case s.all:
		return "all tenants"
	case s.tenant == "":
		return "no tenant"
	}
	return "tenant " + s.tenant
}

// nameRE is the form of a tenant's name.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidName reports whether name is a valid tenant name: 1-63 lowercase
// letters, digits, '-' or '_', starting with a letter or digit.
func ValidName(name string) bool { return nameRE.MatchString(name) }
