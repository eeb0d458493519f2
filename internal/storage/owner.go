package storage

import (
	"context"

	"github.com/agentbox/agentbox/errdefs"
)

// Owner is who a template request acts for. Templates are tenant-scoped:
// one made with a tenant's key belongs to that tenant, and only it and the
// admin see it, use it, build new versions of it or remove it; one made
// with an admin key (the base, busybox and python templates the scripts
// build) is public, seen and used by every tenant. A template another
// tenant owns answers the same not-found error as a name that does not
// exist.
type Owner struct {
	Tenant string
	Admin  bool
	// MaxBytes, when positive, caps the files of a new image-imported
	// version below the pool's import limit: what the tenant's disk
	// quota leaves (the upload route sets it).
	MaxBytes int64
}

type ownerKey struct{}

// WithOwner returns ctx carrying o. The API server sets it on every
// authenticated request, so that everything the pool does for the request
// (imports, builds, the template lookups of create) is scoped to o.
func WithOwner(ctx context.Context, o Owner) context.Context {
	return context.WithValue(ctx, ownerKey{}, o)
}

// OwnerFrom returns the owner ctx carries. A context without one (the
// daemon's own work, tests, tools on the host) acts as the admin.
func OwnerFrom(ctx context.Context) Owner {
	if o, ok := ctx.Value(ownerKey{}).(Owner); ok {
		return o
	}
	return Owner{Admin: true}
}

// Sees reports whether o may see and use t.
func (o Owner) Sees(t *Template) bool {
	return o.Admin || t.Tenant == "" || t.Tenant == o.Tenant
}

// newVersionOwner returns the owner of a new version of a template whose
// current owner is cur (exists: the name has versions), or an
// already-exists error when o may not add one. A version always keeps its
// name's owner: a tenant cannot add a version to a public template or to
// another tenant's (which would put its files under their name), and the
// admin adding one to a tenant's template acts for that tenant.
func (o Owner) newVersionOwner(name string, exists bool, cur string) (string, error) {
	switch {
	case !exists && o.Admin:
		return "", nil
	case !exists:
		return o.Tenant, nil
	case o.Admin || cur == o.Tenant:
		return cur, nil
	case cur == "":
		return "", errdefs.New(errdefs.ErrAlreadyExists, "template %q is a public template: only an admin key can add versions to it; choose another name", name)
	default:
		return "", errdefs.New(errdefs.ErrAlreadyExists, "template name %q is taken; choose another name", name)
	}
}
