package server

import (
	"net/http"

	"github.com/agentbox/agentbox/api"
)

// setEgress changes a sandbox's egress policy at runtime
// (POST /v1/sandboxes/{id}/egress, body: the network field's egress,
// allow and deny; see docs/network.md).
func (s *Server) setEgress(w http.ResponseWriter, r *http.Request) {
	var req api.Network
	if err := s.decode(w, r, &req); err != nil {
		writeError(w, err)
		return
	}
	sb, err := s.svc.SetEgress(r.Context(), scope(r), r.PathValue("id"), &req)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, sb)
}

// egressLog answers a sandbox's egress log
// (GET /v1/sandboxes/{id}/egress/log; see docs/network.md).
func (s *Server) egressLog(w http.ResponseWriter, r *http.Request) {
	l, err := s.svc.EgressLog(r.Context(), scope(r), r.PathValue("id"))
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, l)
}

// egressHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) egressHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"POST /v1/sandboxes/{id}/egress":    s.setEgress,
		"GET /v1/sandboxes/{id}/egress/log": s.egressLog,
	}
}
