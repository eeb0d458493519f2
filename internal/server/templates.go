package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// uploadTemplate is POST /v1/templates/import?name=N[&user=U&workdir=D&env=K=V...]:
// the body is an image archive (docker save or OCI layout tar, optionally
// gzipped), streamed to a temporary file and imported like the image field
// of POST /v1/templates. With a tenant's key the template belongs to that
// tenant; with an admin key it is public (storage.Owner).
func (s *Server) uploadTemplate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := api.ImportTemplateRequest{Name: q.Get("name"), User: q.Get("user"), Workdir: q.Get("workdir")}
	if req.Name == "" {
		writeError(w, errdefs.Invalid("the name query parameter is required: POST /v1/templates/import?name=NAME"))
		return
	}
	for _, kv := range q["env"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			writeError(w, errdefs.Invalid("env %q is not KEY=VALUE", kv))
			return
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		req.Env[k] = v
	}
	// A name the caller may not add a version to fails before the upload.
	ctx := r.Context()
	if err := s.pool.CheckNewVersion(ctx, req.Name); err != nil {
		writeError(w, err)
		return
	}
	// A tenant's templates count against its disk quota; its uploads
	// take turns, so that concurrent ones cannot each use what is left.
	if p := principal(ctx); !p.Admin {
		mu, _ := s.uploads.LoadOrStore(p.Tenant, &sync.Mutex{})
		mu.(*sync.Mutex).Lock()
		defer mu.(*sync.Mutex).Unlock()
		left, err := s.templateBytesLeft(ctx, p.Tenant)
		if err != nil {
			writeError(w, err)
			return
		}
		ctx = storage.WithOwner(ctx, storage.Owner{Tenant: p.Tenant, MaxBytes: left})
	}
	body := http.MaxBytesReader(w, r.Body, storage.MaxImageUpload)
	t, err := s.pool.ImportImageReader(ctx, req, body)
	if err != nil {
		writeError(w, fmt.Errorf("importing template: %w", err))
		return
	}
	writeJSON(w, http.StatusCreated, t.API())
}

// templateBytesLeft is how many bytes of files a new template version of
// tenant may hold: its disk_mb quota less what its sandboxes (as quotas
// count them) and every version of its templates hold; 0 when it has no
// disk quota (no limit but the pool's), an error when nothing is left.
func (s *Server) templateBytesLeft(ctx context.Context, tenant string) (int64, error) {
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

// deleteTemplate is DELETE /v1/templates/{name}: every version goes,
// unless a sandbox or snapshot still uses one. A tenant removes only its
// own templates (another tenant's is not found); public ones need an
// admin key.
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	p := principal(r.Context())
	name := r.PathValue("name")
	t, err := s.pool.TemplateFor(r.Context(), name)
	if err != nil {
		writeError(w, err)
		return
	}
	if t.Tenant == "" && !p.Admin {
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "template %q is public: removing it needs an admin key", name))
		return
	}
	sbs, err := s.st.ListSandboxes(r.Context(), store.Filter{})
	if err != nil {
		writeError(w, err)
		return
	}
	var users []string
	others := 0 // in use by other tenants (the admin's): counted, not named
	for _, sb := range sbs {
		if sb.Template == name && sb.State != api.StateDestroyed {
			if !p.Admin && sb.Tenant != p.Tenant {
				others++
				continue
			}
			users = append(users, "sandbox "+sb.ID)
		}
	}
	snaps, err := s.st.ListSnapshots(r.Context(), "")
	if err != nil {
		writeError(w, err)
		return
	}
	for _, sn := range snaps {
		if sn.Template == name {
			if !p.Admin && sn.Tenant != p.Tenant {
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
		writeError(w, errdefs.Precondition("template %q is in use by %s%s: delete those first", name, strings.Join(users, ", "), more))
		return
	}
	s.svc.DropWarm(name) // warm pool sandboxes use it too (internal/sandbox/warmpool.go)
	if err := s.pool.RemoveTemplateAll(r.Context(), name); err != nil {
		writeError(w, fmt.Errorf("removing template: %w", err))
		return
	}
	// Build layers only it used go with it (build.go).
	if _, err := s.svc.GCLayers(r.Context()); err != nil {
		s.log.Warn("removing unused build layers", "err", err)
	}
	w.WriteHeader(http.StatusNoContent)
}
