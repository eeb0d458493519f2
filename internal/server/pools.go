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
