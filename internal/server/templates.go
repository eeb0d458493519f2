package server

import (
	"net/http"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
)

// uploadTemplate is POST /v1/templates/import?name=N[&user=U&workdir=D&env=K=V...]:
// the body is an image archive (docker save or OCI layout tar, optionally
// gzipped), streamed to a temporary file and imported like the image field
// of POST /v1/templates. With a tenant's key the template belongs to that
// tenant; with an admin key it is public (internal/templates).
func (s *Server) uploadTemplate(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	req := api.ImportTemplateRequest{Name: q.Get("name"), User: q.Get("user"), Workdir: q.Get("workdir")}
	if req.Name == "" {
		writeError(w, errdefs.Invalid("the name query parameter is required: POST /v1/templates/import?name=NAME"))
		return
	}
	if m := q.Get("memory_mb"); m != "" {
		n, err := strconv.ParseInt(m, 10, 64)
		if err != nil || n < 0 {
			writeError(w, errdefs.Invalid("memory_mb must be a number of MiB, got %q", m))
			return
		}
		req.MemoryMB = n
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
	// A name the caller may not add a version to fails before the
	// upload; a tenant's upload counts against its disk quota
	// (internal/templates).
	body := http.MaxBytesReader(w, r.Body, storage.MaxImageUpload)
	t, err := s.tpl.Upload(r.Context(), req, body)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t.API())
}

// deleteTemplate is DELETE /v1/templates/{name}: every version goes,
// unless a sandbox or snapshot still uses one (templates.Service.Remove).
func (s *Server) deleteTemplate(w http.ResponseWriter, r *http.Request) {
	if err := s.tpl.Remove(r.Context(), r.PathValue("name")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// pushTemplate is POST /v1/templates/{name}/push {"ref": REF}: the
// newest version of a template the caller sees, pushed to a registry as
// an OCI image; answers the ref and manifest digest.
func (s *Server) pushTemplate(w http.ResponseWriter, r *http.Request) {
	var req api.PushRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	out, err := s.tpl.Push(r.Context(), r.PathValue("name"), req.Ref)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// pullTemplate is POST /v1/templates/pull {"ref": REF, "name": N}: an
// OCI image from a registry as a new template version, as an upload.
func (s *Server) pullTemplate(w http.ResponseWriter, r *http.Request) {
	var req api.PullRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	t, err := s.tpl.Pull(r.Context(), req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, t)
}

// templateHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) templateHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/templates/import":      s.uploadTemplate,
		"DELETE /v1/templates/{name}":    s.deleteTemplate,
		"POST /v1/templates/{name}/push": s.pushTemplate,
		"POST /v1/templates/pull":        s.pullTemplate,
	}
}
