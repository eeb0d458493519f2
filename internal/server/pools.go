package server

import (
	"net/http"

	"github.com/agentbox/agentbox/api"
)

// listPools reports the warm pools (GET /v1/pools). Any valid key may
// read it: it says how many sandboxes of which template are ready, no
// tenant's data.
func (s *Server) listPools(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, api.ListPoolsResponse{Pools: s.svc.Pools()})
}

// poolHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) poolHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/pools": s.listPools,
	}
}
