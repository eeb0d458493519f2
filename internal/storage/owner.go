package storage

import (
	"context"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Templates are tenant-scoped: one made for a tenant belongs to that
// tenant, and only it and the admin see it, use it, build new versions of
// it or remove it; one made for the admin (the base, busybox and python
// templates the scripts build) is public, seen and used by every tenant.
// A template another tenant owns answers the same not-found error as a
// name that does not exist.
//
// Whom a call acts for is the principal its context carries
// (internal/tenancy). Every method of the pool that takes a template name
// from a caller, lists templates or makes a version reads it, and refuses
// a context without one (tenancy.ErrNoPrincipal): nothing acts as the
// admin by default. The unscoped lookups (Template, TemplateVersion,
// TemplateVersions, ListTemplates) take no context: they are for versions
// that records of the daemon already name, and for the template service's
// own accounting, never for a name a request sent.

// principal returns the principal ctx carries, or an error.
func principal(ctx context.Context) (tenancy.Principal, error) {
	return tenancy.From(ctx)
}

type maxBytesKey struct{}

// WithMaxBytes returns ctx carrying a cap on the files of the new
// template version made under it (an image import, an image layer of a
// build): what the tenant's disk quota leaves. The template service sets
// it; n <= 0 is no cap but the pool's import limit.
func WithMaxBytes(ctx context.Context, n int64) context.Context {
	return context.WithValue(ctx, maxBytesKey{}, n)
}

// MaxBytesFrom returns the cap WithMaxBytes set, or 0.
func MaxBytesFrom(ctx context.Context) int64 {
	n, _ := ctx.Value(maxBytesKey{}).(int64)
	return n
}

// sees reports whether p may see and use t.
func sees(p tenancy.Principal, t *Template) bool {
	return p.Admin || t.Tenant == "" || t.Tenant == p.Tenant
}

// newVersionOwner returns the owner of a new version of a template whose
// current owner is cur (exists: the name has versions), or an
// already-exists error when p may not add one. A version always keeps its
// name's owner: a tenant cannot add a version to a public template or to
// another tenant's (which would put its files under their name), and the
// admin adding one to a tenant's template acts for that tenant.
func newVersionOwner(p tenancy.Principal, name string, exists bool, cur string) (string, error) {
	switch {
	case !exists && p.Admin:
		return "", nil
	case !exists:
		return p.Tenant, nil
	case p.Admin || cur == p.Tenant:
		return cur, nil
	case cur == "":
		return "", errdefs.New(errdefs.ErrAlreadyExists, "template %q is a public template: only an admin key can add versions to it; choose another name", name)
	default:
		return "", errdefs.New(errdefs.ErrAlreadyExists, "template name %q is taken; choose another name", name)
	}
}
