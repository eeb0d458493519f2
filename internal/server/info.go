package server

import (
	"net/http"
	"slices"

	"github.com/agentbox/agentbox/internal/version"
)

// infoHandler answers GET /v1/info: the daemon's tiers, defaults, limits
// and running sandboxes; to admins also where it keeps its state and logs.
func (s *Server) infoHandler(w http.ResponseWriter, r *http.Request) {
	out := s.info
	out.Tiers = slices.Clone(s.info.Tiers)
	out.Version = version.Version
	out.Sandboxes = s.svc.LiveCount()
	if !principal(r.Context()).Admin {
		out.DataDir, out.RunDir, out.Socket, out.Listen, out.Log = "", "", "", "", ""
	}
	writeJSON(w, http.StatusOK, out)
}

// infoHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) infoHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/info": s.infoHandler,
	}
}
