package server

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// uploadTemplate is POST /v1/templates/import?name=N[&user=U&workdir=D&env=K=V...]:
// the body is an image archive (docker save or OCI layout tar, optionally
// gzipped), streamed to a temporary file and imported like the image field
// of POST /v1/templates. Admin only: templates are shared by every tenant.
func (s *Server) uploadTemplate(w http.ResponseWriter, r *http.Request) {
	if !principal(r.Context()).Admin {
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "importing a template needs an admin key: templates are shared by every tenant"))
		return
	}
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
	body := http.MaxBytesReader(w, r.Body, storage.MaxImageUpload)
	t, err := s.pool.ImportImageReader(r.Context(), req, body)
	if err != nil {
		writeError(w, fmt.Errorf("importing template: %w", err))
		return
	}
	writeJSON(w, http.StatusCreated, t.API())
}

// deleteTemplate is DELETE /v1/templates/{name}: every version goes,
// unless a sandbox or snapshot still uses one (admin only).
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if !principal(r.Context()).Admin {
		writeError(w, errdefs.New(errdefs.ErrPermissionDenied, "removing a template needs an admin key"))
		return
	}
	name := r.PathValue("name")
	if _, err := s.pool.Template(name); err != nil {
		writeError(w, err)
		return
	}
	sbs, err := s.st.ListSandboxes(r.Context(), store.Filter{})
	if err != nil {
		writeError(w, err)
		return
	}
	var users []string
	for _, sb := range sbs {
		if sb.Template == name && sb.State != api.StateDestroyed {
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
			users = append(users, "snapshot "+sn.ID)
		}
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
	if err := s.pool.RemoveTemplateAll(r.Context(), name); err != nil {
		writeError(w, fmt.Errorf("removing template: %w", err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
