package guest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// handleSetEnv is PUT proto.SetEnv.Path: the daemon replaces the default
// environment of later execs (a warm pool sandbox handed out with its
// request's env). Execs already running keep theirs.
func (s *Server) handleSetEnv(w http.ResponseWriter, r *http.Request) {
	var body proto.GuestEnv
	if err := json.NewDecoder(io.LimitReader(r.Body, 16<<20)).Decode(&body); err != nil {
		s.writeError(w, errdefs.Invalid("decoding the environment: %v", err))
		return
	}
	for _, kv := range body.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			s.writeError(w, errdefs.Invalid("environment entry %q is not KEY=VALUE", kv))
			return
		}
	}
	s.SetEnv(body.Env)
	w.WriteHeader(http.StatusNoContent)
}

// defaultEnv is the default environment of an exec, read under mu since
// SetEnv may replace it while the server runs: the sandbox's CPU limit
// (cpus.go) and then the configured one, which overrides it.
func (s *Server) defaultEnv() []string {
	cpu := s.cpu.env()
	s.mu.Lock()
	defer s.mu.Unlock()
	if cpu == "" {
		return s.cfg.Env
	}
	return append([]string{cpu}, s.cfg.Env...)
}
