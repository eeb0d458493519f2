// Package templates is the template service: what the API server calls
// to list, inspect, import, upload, build and remove templates. It sits
// between the server (which speaks HTTP) and the storage pool (which keeps
// the files), and applies in one place the rules of who may do what:
// ownership (a tenant's templates are its own; public ones are the
// admin's), name rules, the disk quota a tenant's templates count against,
// and the checks before a template is removed.
//
// Whom a call acts for is the principal its context carries
// (internal/tenancy): every method refuses a context without one.
package templates

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/build/builder"
	"github.com/agentbox/agentbox/internal/registry"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Service applies ownership, quotas and name rules to templates.
type Service struct {
	pool  *storage.Pool
	st    *store.Store
	boxes *sandbox.Service // build sandboxes, warm pools, build layer GC
	log   *slog.Logger
	reg   *registry.Client // pushes and pulls (registry.go); nil: refused

	// turns holds a *sync.Mutex per tenant: a tenant's uploads and
	// builds run one at a time, so each sees what the one before it took
	// of the disk quota.
	turns sync.Map
}

// New returns the template service over pool, with tenants' quotas and
// the sandboxes and snapshots that use templates from st, and build
// sandboxes from boxes.
func New(pool *storage.Pool, st *store.Store, boxes *sandbox.Service, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{pool: pool, st: st, boxes: boxes, log: log}
}

// List returns the newest version of every template the caller sees: the
// public ones and its own (every one for the admin), by name.
func (s *Service) List(ctx context.Context) ([]*storage.Template, error) {
	return s.pool.ListTemplatesFor(ctx)
}

// Get returns what the API shows of template name (versions, layers):
// not found when the caller may not see it.
func (s *Service) Get(ctx context.Context, name string) (api.Template, error) {
	t, err := s.pool.TemplateFor(ctx, name)
	if err != nil {
		return api.Template{}, err
	}
	return s.pool.Describe(t), nil
}

// Describe returns what the API shows of t.
func (s *Service) Describe(t *storage.Template) api.Template { return s.pool.Describe(t) }

// ImportHost makes a template from a root filesystem directory or an
// image on the daemon's host (POST /v1/templates): the admin only, since
// it reads the host's files.
func (s *Service) ImportHost(ctx context.Context, req api.ImportTemplateRequest) (*storage.Template, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	if !who.Admin {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "importing a template from a host directory needs an admin key")
	}
	t, err := s.pool.ImportTemplate(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("importing template: %w", err)
	}
	return t, nil
}

// CheckName reports whether the caller may make a new version of template
// name (a valid name that is new, or one it owns): an already-exists
// error for a name that is public or another tenant's, so that a long
// upload or build can be refused before anything is read.
func (s *Service) CheckName(ctx context.Context, name string) error {
	return s.pool.CheckNewVersion(ctx, name)
}

// Upload imports the image archive read from body as a new version of
// req.Name for the caller. A tenant's upload counts against its disk
// quota: refused at once when nothing is left, and stopped (no template
// left) when the image's files pass what is left.
func (s *Service) Upload(ctx context.Context, req api.ImportTemplateRequest, body io.Reader) (*storage.Template, error) {
	if err := s.CheckName(ctx, req.Name); err != nil {
		return nil, err
	}
	ctx, done, err := s.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	t, err := s.pool.ImportImageReader(ctx, req, body)
	if err != nil {
		return nil, fmt.Errorf("importing template: %w", err)
	}
	return t, nil
}

// Build runs a build spec (internal/build) as a new version of req.Name
// for the caller; a tenant builds its own templates, from the public ones
// and its own, within its disk quota (as for Upload: the build's layers
// count). ready, if not nil, is called once every check that can refuse
// the build at once has passed, before any step runs: errors Build
// returns before it are the request's, those after it the build's.
func (s *Service) Build(ctx context.Context, req *builder.Request, ready func()) (*storage.Template, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	if err := s.CheckName(ctx, req.Name); err != nil {
		return nil, err
	}
	ctx, done, err := s.turn(ctx)
	if err != nil {
		return nil, err
	}
	defer done()
	if ready != nil {
		ready()
	}
	b := &builder.Builder{Pool: s.pool, Boxes: s.boxes, Log: s.log}
	t, err := b.Build(ctx, req)
	if err != nil && !who.Admin && errors.Is(err, errdefs.ErrResourceExhausted) {
		// A layer past the quota is unused cache: it goes now, not at
		// the next daemon start.
		if _, gerr := s.boxes.GCLayers(ctx); gerr != nil {
			s.log.Warn("removing unused build layers", "err", gerr)
		}
	}
	return t, err
}

// turn makes ctx's tenant wait for its earlier uploads and builds, and
// returns ctx capped (storage.WithMaxBytes) at what its disk quota leaves
// for a new template version, with the function that ends its turn. The
// admin takes no turn and has no cap.
func (s *Service) turn(ctx context.Context) (context.Context, func(), error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, nil, err
	}
	if who.Admin {
		return ctx, func() {}, nil
	}
	mu, _ := s.turns.LoadOrStore(who.Tenant, &sync.Mutex{})
	mu.(*sync.Mutex).Lock()
	left, err := s.bytesLeft(ctx, who.Tenant)
	if err != nil {
		mu.(*sync.Mutex).Unlock()
		return nil, nil, err
	}
	return storage.WithMaxBytes(ctx, left), mu.(*sync.Mutex).Unlock, nil
}

// bytesLeft is how many bytes of files a new template version of tenant
// may hold: its disk_mb quota less what its sandboxes (as quotas count
// them) and every version of its templates hold; 0 when it has no disk
// quota (no limit but the pool's), an error when nothing is left.
func (s *Service) bytesLeft(ctx context.Context, tenant string) (int64, error) {
	tn, err := s.st.GetTenant(ctx, tenant)
	if errors.Is(err, errdefs.ErrNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	if tn.Quotas.DiskMB <= 0 {
		return 0, nil
	}
	u, err := s.st.TenantUsage(ctx, tenant)
	if err != nil {
		return 0, err
	}
	used := u.DiskMB << 20
	tpls, err := s.pool.ListTemplates()
	if err != nil {
		return 0, err
	}
	for _, t := range tpls {
		if t.Tenant != tenant {
			continue
		}
		vs, err := s.pool.TemplateVersions(t.Name)
		if err != nil {
			return 0, err
		}
		for _, v := range vs {
			used += v.SizeBytes
		}
	}
	left := tn.Quotas.DiskMB<<20 - used
	if left <= 0 {
		return 0, errdefs.Exhausted("tenant %q: disk_mb quota is %d, its sandboxes and templates hold %d MiB; remove templates (agentbox template rm) or sandboxes, or ask an admin to raise the quota (agentbox tenant set)", tenant, tn.Quotas.DiskMB, used>>20)
	}
	return left, nil
}

// Remove deletes every version of template name, unless a sandbox or
// snapshot still uses one. A tenant removes only its own templates
// (another tenant's is not found); public ones need the admin.
func (s *Service) Remove(ctx context.Context, name string) error {
	who, err := tenancy.From(ctx)
	if err != nil {
		return err
	}
	t, err := s.pool.TemplateFor(ctx, name)
	if err != nil {
		return err
	}
	if t.Tenant == "" && !who.Admin {
		return errdefs.New(errdefs.ErrPermissionDenied, "template %q is public: removing it needs an admin key", name)
	}
	sbs, err := s.st.ListSandboxes(ctx, store.Filter{Scope: tenancy.AllTenants()})
	if err != nil {
		return err
	}
	var users []string
	others := 0 // in use by other tenants (the admin's): counted, not named
	for _, sb := range sbs {
		if sb.Template == name && sb.State != api.StateDestroyed {
			if !who.Admin && sb.Tenant != who.Tenant {
				others++
				continue
			}
			users = append(users, "sandbox "+sb.ID)
		}
	}
	snaps, err := s.st.ListSnapshots(ctx, tenancy.AllTenants())
	if err != nil {
		return err
	}
	for _, sn := range snaps {
		if sn.Template == name {
			if !who.Admin && sn.Tenant != who.Tenant {
				others++
				continue
			}
			users = append(users, "snapshot "+sn.ID)
		}
	}
	if others > 0 {
		users = append(users, fmt.Sprintf("%d sandboxes or snapshots of other tenants", others))
	}
	if len(users) > 0 {
		more := ""
		if len(users) > 5 {
			more = fmt.Sprintf(" and %d more", len(users)-5)
			users = users[:5]
		}
		return errdefs.Precondition("template %q is in use by %s%s: delete those first", name, strings.Join(users, ", "), more)
	}
	s.boxes.DropWarm(name) // warm pool sandboxes use it too (internal/sandbox/warmpool.go)
	if err := s.pool.RemoveTemplateAll(ctx, name); err != nil {
		return fmt.Errorf("removing template: %w", err)
	}
	// Build layers only it used go with it (internal/sandbox/build.go).
	if _, err := s.boxes.GCLayers(ctx); err != nil {
		s.log.Warn("removing unused build layers", "err", err)
	}
	return nil
}

// OwnedBy returns the names of the templates tenant owns (the admin
// only): a tenant that owns templates cannot be removed, since a later
// tenant of the same name would inherit them.
func (s *Service) OwnedBy(ctx context.Context, tenant string) ([]string, error) {
	who, err := tenancy.From(ctx)
	if err != nil {
		return nil, err
	}
	if !who.Admin {
		return nil, errdefs.New(errdefs.ErrPermissionDenied, "listing a tenant's templates needs an admin key")
	}
	tpls, err := s.pool.ListTemplates()
	if err != nil {
		return nil, err
	}
	var owned []string
	for _, t := range tpls {
		if t.Tenant == tenant {
			owned = append(owned, t.Name)
		}
	}
	return owned, nil
}
