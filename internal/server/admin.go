package server

import (
	"errors"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/posture"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// The admin routes: API keys, tenants and their quotas, the posture check.
// Each answers 403 to a key that is not an admin key.

// requireAdmin answers 403 and returns false unless the caller is an admin.
func requireAdmin(w http.ResponseWriter, r *http.Request, what string) bool {
	if principal(r.Context()).Admin {
		return true
	}
	writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "%s needs an admin key", what))
	return false
}

func keyAPI(k *store.KeyRecord) api.Key {
	return api.Key{ID: k.ID, Tenant: k.Tenant, Name: k.Name, Admin: k.Admin, CreatedAt: k.CreatedAt,
		LastUsedAt: k.LastUsedAt, RevokedAt: k.RevokedAt}
}

func (s *Server) createKey(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "creating API keys") {
		return
	}
	var req api.CreateKeyRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if req.Tenant == "" {
		writeError(w, errdefs.Invalid("tenant is required: the key acts for that tenant's sandboxes"))
		return
	}
	if len(req.Name) > 128 {
		writeError(w, errdefs.Invalid("name must be at most 128 bytes, got %d", len(req.Name)))
		return
	}
	if _, err := s.st.GetTenant(r.Context(), req.Tenant); err != nil {
		if errors.Is(err, errdefs.ErrNotFound) {
			err = errdefs.NotFound("tenant %q does not exist; create it first with `agentbox tenant create %s`", req.Tenant, req.Tenant)
		}
		writeError(w, err)
		return
	}
	secret, rec, err := auth.CreateKey(r.Context(), s.st, req.Tenant, req.Name, req.Admin)
	if err != nil {
		writeError(w, err)
		return
	}
	out := keyAPI(rec)
	out.Secret = secret
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listKeys(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "listing API keys") {
		return
	}
	keys, err := s.st.ListKeys(r.Context(), r.URL.Query().Get("tenant"))
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.ListKeysResponse{Keys: []api.Key{}}
	for _, k := range keys {
		out.Keys = append(out.Keys, keyAPI(k))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) revokeKey(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "revoking API keys") {
		return
	}
	id := r.PathValue("id")
	keys, err := s.st.ListKeys(r.Context(), "")
	if err != nil {
		writeError(w, err)
		return
	}
	admins, target := 0, (*store.KeyRecord)(nil)
	for _, k := range keys {
		if k.Admin && k.RevokedAt == nil {
			admins++
		}
		if k.ID == id {
			target = k
		}
	}
	if target == nil {
		writeError(w, errdefs.NotFound("API key %s not found; list keys with `agentbox key ls`", id))
		return
	}
	if target.Admin && target.RevokedAt == nil && admins == 1 {
		writeError(w, errdefs.Precondition("%s is the last admin key; create another admin key before revoking it", id))
		return
	}
	if err := s.st.RevokeKey(r.Context(), id); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) tenantAPI(r *http.Request, t *store.TenantRecord) (api.Tenant, error) {
	u, err := s.st.TenantUsage(r.Context(), t.Name)
	if err != nil {
		return api.Tenant{}, err
	}
	return api.Tenant{
		Name:      t.Name,
		Quotas:    api.Quotas{Sandboxes: t.Quotas.Sandboxes, CPU: t.Quotas.CPU, MemoryMB: t.Quotas.MemoryMB, DiskMB: t.Quotas.DiskMB, Pids: t.Quotas.Pids},
		Usage:     api.Quotas{Sandboxes: u.Sandboxes, CPU: u.CPU, MemoryMB: u.MemoryMB, DiskMB: u.DiskMB, Pids: u.Pids},
		CreatedAt: t.CreatedAt,
	}, nil
}

func validQuotas(q store.Quotas) error {
	if q.Sandboxes < 0 || q.CPU < 0 || q.MemoryMB < 0 || q.DiskMB < 0 || q.Pids < 0 {
		return errdefs.Invalid("quotas must be 0 (no limit) or positive, got %+v", q)
	}
	return nil
}

func (s *Server) createTenant(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "creating tenants") {
		return
	}
	var req api.CreateTenantRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	if !tenancy.ValidName(req.Name) {
		writeError(w, errdefs.Invalid("tenant name must be 1-63 lowercase letters, digits, '-' or '_', starting with a letter or digit; got %q", req.Name))
		return
	}
	t := &store.TenantRecord{Name: req.Name}
	if req.Quotas != nil {
		t.Quotas = store.Quotas{Sandboxes: req.Quotas.Sandboxes, CPU: req.Quotas.CPU, MemoryMB: req.Quotas.MemoryMB, DiskMB: req.Quotas.DiskMB, Pids: req.Quotas.Pids}
	}
	if err := validQuotas(t.Quotas); err != nil {
		writeError(w, err)
		return
	}
	if err := s.st.CreateTenant(r.Context(), t); err != nil {
		writeError(w, err)
		return
	}
	out, err := s.tenantAPI(r, t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) listTenants(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "listing tenants") {
		return
	}
	list, err := s.st.ListTenants(r.Context())
	if err != nil {
		writeError(w, err)
		return
	}
	out := api.ListTenantsResponse{Tenants: []api.Tenant{}}
	for _, t := range list {
		a, err := s.tenantAPI(r, t)
		if err != nil {
			writeError(w, err)
			return
		}
		out.Tenants = append(out.Tenants, a)
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getTenant(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "reading tenants") {
		return
	}
	t, err := s.st.GetTenant(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	out, err := s.tenantAPI(r, t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) updateTenant(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "changing tenants") {
		return
	}
	var req api.UpdateTenantRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	t, err := s.st.GetTenant(r.Context(), r.PathValue("name"))
	if err != nil {
		writeError(w, err)
		return
	}
	if p := req.Quotas; p != nil {
		if p.Sandboxes != nil {
			t.Quotas.Sandboxes = *p.Sandboxes
		}
		if p.CPU != nil {
			t.Quotas.CPU = *p.CPU
		}
		if p.MemoryMB != nil {
			t.Quotas.MemoryMB = *p.MemoryMB
		}
		if p.DiskMB != nil {
			t.Quotas.DiskMB = *p.DiskMB
		}
		if p.Pids != nil {
			t.Quotas.Pids = *p.Pids
		}
	}
	if err := validQuotas(t.Quotas); err != nil {
		writeError(w, err)
		return
	}
	if err := s.st.SetQuotas(r.Context(), t.Name, t.Quotas); err != nil {
		writeError(w, err)
		return
	}
	out, err := s.tenantAPI(r, t)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) deleteTenant(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "removing tenants") {
		return
	}
	name := r.PathValue("name")
	if name == auth.AdminTenant {
		writeError(w, errdefs.Precondition("tenant %q holds the admin key and cannot be removed", name))
		return
	}
	// A tenant's templates would pass to a later tenant of the same name.
	if s.tpl != nil {
		owned, err := s.tpl.OwnedBy(r.Context(), name)
		if err != nil {
			writeError(w, err)
			return
		}
		if len(owned) > 0 {
			writeError(w, errdefs.Precondition("tenant %q owns templates %s: remove them first (agentbox template rm NAME)", name, strings.Join(owned, ", ")))
			return
		}
	}
	if err := s.st.DeleteTenant(r.Context(), name); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sandboxSecurity serves GET /v1/sandboxes/{id}/security: the host-side
// posture check of every process of the sandbox.
func (s *Server) sandboxSecurity(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "the posture check") {
		return
	}
	sb, err := s.svc.Get(r.Context(), tenancy.AllTenants(), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	if sb.Pid <= 0 || (sb.State != api.StateRunning && sb.State != api.StatePaused) {
		writeError(w, errdefs.Precondition("sandbox %s is %s: only a running or paused sandbox has processes to check", sb.ID, sb.State))
		return
	}
	o := s.posture
	if sb.UIDBase != 0 {
		o.UIDBase = sb.UIDBase // a range of its own
	}
	o.SharedRange = sb.UIDBase == 0
	if sb.UIDBase != 0 {
		// The allocator gives no range twice; the check reads it anyway.
		all, err := s.svc.List(r.Context(), tenancy.AllTenants(), sandbox.ListFilter{})
		if err != nil {
			writeError(w, err)
			return
		}
		for _, other := range all {
			if other.ID != sb.ID && other.UIDBase == sb.UIDBase && other.Pid > 0 {
				o.SharedWith = other.ID
			}
		}
	}
	writeJSON(w, http.StatusOK, posture.CheckTier(sb.Isolation, sb.ID, sb.Pid, o))
}

// adminHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) adminHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/keys":                   s.createKey,
		"GET /v1/keys":                    s.listKeys,
		"DELETE /v1/keys/{id}":            s.revokeKey,
		"POST /v1/tenants":                s.createTenant,
		"GET /v1/tenants":                 s.listTenants,
		"GET /v1/tenants/{name}":          s.getTenant,
		"PATCH /v1/tenants/{name}":        s.updateTenant,
		"DELETE /v1/tenants/{name}":       s.deleteTenant,
		"GET /v1/sandboxes/{id}/security": s.sandboxSecurity,
	}
}
