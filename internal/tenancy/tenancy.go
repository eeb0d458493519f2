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
