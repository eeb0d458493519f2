package server

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// serveE2B serves E2B's protocol under /e2b (internal/e2b, docs/e2b.md).
// E2B's SDKs send the key as X-API-KEY (control plane) or X-Access-Token
// (in the sandbox, where Authorization names a Linux user), so the key is
// checked from there; then the request is treated as any other of that
// key's: rate limit, audit, and every call it makes of the API runs in
// process as that key.
func (s *Server) serveE2B(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	w = sw
	ar := r.Clone(r.Context())
	ar.Header.Set("Authorization", "Bearer "+e2b.Key(r))
	p, err := s.auth.Authenticate(r.Context(), ar)
	if err != nil {
		if ok, _ := s.limiter.allow("addr:"+remoteHost(r), start); ok {
			e2b.Unauthenticated(w, r, err.Error())
		} else {
			w.Header().Set("Retry-After", "1")
			e2b.RateLimited(w, r, "too many requests without a valid API key from "+remoteHost(r)+"; slow down")
		}
		s.audit(r, "", "", sw.status)
		return
	}
	if ok, wait := s.limiter.allow("key:"+p.KeyID, start); !ok && !p.Admin {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		e2b.RateLimited(w, r, "rate limit of API key "+p.KeyID+" exceeded; retry in "+wait.Round(time.Millisecond).String())
		s.audit(r, p.KeyID, p.Tenant, sw.status)
		return
	}
	metrics.NoteTenant(r.Context(), p.Tenant)
	r = r.WithContext(tenancy.With(r.Context(), p))
	s.e2b.Serve(w, r, s.inProcessClient(p))
	s.audit(r, p.KeyID, p.Tenant, sw.status)
}
