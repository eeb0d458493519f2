package server

import (
	"context"
	"errors"
	"io"
	"net/http"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage"
)

// Handlers of the state routes: pause, resume, snapshots, fork, reset
// (see internal/sandbox/{pause,snapshot,fork,reset}.go).

// decodeOptional decodes a JSON body that may be absent.
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) error {
	if r.ContentLength == 0 {
		return nil
	}
	err := s.decode(w, r, v)
	if err != nil && r.ContentLength < 0 && errors.Is(err, io.EOF) {
		return nil
	}
	return err
}

func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.PauseRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	pause := s.svc.Pause
	if req.ToDisk {
		pause = s.svc.PauseToDisk
	}
	sb, err := pause(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request) {
	sb, err := s.svc.Resume(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.CreateSnapshotRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	snapshot := s.svc.Snapshot
	if req.Memory {
		snapshot = s.svc.SnapshotWithMemory
	}
	snap, err := snapshot(r.Context(), scope(r), r.PathValue("id"), req.Name)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap)
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request) {
	list, err := s.svc.ListSnapshots(r.Context(), scope(r))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, api.ListSnapshotsResponse{Snapshots: list})
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request) {
	snap, err := s.svc.GetSnapshot(r.Context(), scope(r), r.PathValue("ref"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, snap)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request) {
	if q := r.URL.Query().Get("when_unused"); q != "" {
		if q != "true" {
			writeError(w, errdefs.Invalid("when_unused must be true, got %q", q))
			return
		}
		kept, err := s.svc.ReleaseSnapshot(r.Context(), scope(r), r.PathValue("ref"))
		switch {
		case err != nil:
			writeError(w, err)
		case kept != nil: // internal now: removed with its last dependent
			writeJSON(w, http.StatusOK, kept)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
		return
	}
	if err := s.svc.DeleteSnapshot(r.Context(), scope(r), r.PathValue("ref")); err != nil {
		writeError(w, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.ForkRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	fork := s.svc.Fork
	if req.Memory {
		fork = s.svc.ForkWithMemory
	}
	list, err := fork(r.Context(), scope(r), r.PathValue("id"), req.Count)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, api.ForkResponse{Sandboxes: list})
}

func (s *Server) resetSandbox(w http.ResponseWriter, r *http.Request) {
	var req api.ResetRequest
	if err := s.decodeOptional(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.svc.Reset(r.Context(), scope(r), r.PathValue("id"), req.Snapshot, req.Template)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

// stateHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) stateHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/sandboxes/{id}/pause":     s.pauseSandbox,
		"POST /v1/sandboxes/{id}/resume":    s.resumeSandbox,
		"POST /v1/sandboxes/{id}/snapshots": s.createSnapshot,
		"POST /v1/sandboxes/{id}/fork":      s.forkSandbox,
		"POST /v1/sandboxes/{id}/reset":     s.resetSandbox,
		"GET /v1/snapshots":                 s.listSnapshots,
		"GET /v1/snapshots/{ref}":           s.getSnapshot,
		"DELETE /v1/snapshots/{ref}":        s.deleteSnapshot,
		"POST /v1/snapshots/{ref}/push":     s.pushSnapshot,
		"POST /v1/snapshots/pull":           s.pullSnapshot,
		"GET /v1/snapshots/{ref}/export":    s.exportSnapshot,
		"POST /v1/snapshots/import":         s.importSnapshot,
	}
}

// pushSnapshot is POST /v1/snapshots/{ref}/push {"ref": REF}: a
// snapshot's files as an OCI artifact in a registry (snapshotoci.go in
// internal/sandbox).
func (s *Server) pushSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.PushRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	out, err := s.svc.PushSnapshot(r.Context(), scope(r), r.PathValue("ref"), req.Ref)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// pullSnapshot is POST /v1/snapshots/pull {"ref": REF, "name": N}: a
// pushed snapshot as a new snapshot of the caller's, its template found
// here or pulled from the ref the snapshot names.
func (s *Server) pullSnapshot(w http.ResponseWriter, r *http.Request) {
	var req api.PullRequest
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	pullTemplate := func(ctx context.Context, ref, name string) error {
		_, err := s.tpl.Pull(ctx, api.PullRequest{Ref: ref, Name: name})
		return err
	}
	snap, err := s.svc.PullSnapshot(r.Context(), principal(r.Context()).Tenant, req, pullTemplate)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap)
}

// exportSnapshot is GET /v1/snapshots/{ref}/export (admin): the snapshot
// as one uncompressed snapshot stream (snapshotstream.go in
// internal/sandbox), for POST /v1/snapshots/import on another node. An
// error after the first byte cuts the stream short (the import fails).
func (s *Server) exportSnapshot(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "exporting a snapshot") {
		return
	}
	write, err := s.svc.ExportSnapshot(r.Context(), scope(r), r.PathValue("ref"))
	if err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", storage.SnapshotStreamType)
	w.WriteHeader(http.StatusOK)
	if err := write(w); err != nil {
		panic(http.ErrAbortHandler) // the client sees the stream cut short
	}
}

// importSnapshot is POST /v1/snapshots/import?name=N (admin): a snapshot
// stream (what GET /v1/snapshots/{ref}/export answers) as the request
// body, made a new snapshot of the caller's tenant. The body is raw, not
// JSON: bounded by storage.MaxSnapshotStream, the import's own limits and
// the tenant's disk quota.
func (s *Server) importSnapshot(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "importing a snapshot stream") {
		return
	}
	pullTemplate := func(ctx context.Context, ref, name string) error {
		_, err := s.tpl.Pull(ctx, api.PullRequest{Ref: ref, Name: name})
		return err
	}
	body := http.MaxBytesReader(w, r.Body, storage.MaxSnapshotStream)
	snap, err := s.svc.ImportSnapshot(r.Context(), principal(r.Context()).Tenant, r.URL.Query().Get("name"), body, pullTemplate)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusCreated, snap)
}
