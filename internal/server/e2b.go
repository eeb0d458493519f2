package server

import (
	"net"
	"net/http"
	"strconv"
	"strings"
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
	ar.Header.Set("Authorization", "Bearer "+s.e2b.Credential(r))
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

// e2bHost maps E2B's host names under the preview domain onto /e2b, as
// E2B's own proxy routes them, for SDKs configured with E2B_DOMAIN (or
// reaching getHost, uploadUrl and downloadUrl URLs):
//
//	api.<domain>/...                E2B's control plane (agentbox's /v1/ and /mcp stay agentbox's)
//	49983-<id>.<domain>/...         the sandbox's envd
//	49999-<id>.<domain>/...         the sandbox's code interpreter
//
// Any other <port>-<id>.<domain> stays a preview of that port. It returns
// the request to serve as E2B's, or false.
func (s *Server) e2bHost(r *http.Request) (*http.Request, bool) {
	return e2bHostOf(r, s.svc.PreviewDomain())
}

// e2bHostOf is e2bHost with the preview domain given.
func e2bHostOf(r *http.Request, domain string) (*http.Request, bool) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if host == "api."+domain {
		if strings.HasPrefix(r.URL.Path, "/v1/") || r.URL.Path == "/mcp" || e2b.Match(r) {
			return nil, false
		}
		r = withE2BPrefix(r)
		return r.WithContext(e2b.WithHostDomain(r.Context(), strings.TrimPrefix(strings.ToLower(r.Host), "api."))), true
	}
	t, ok := parsePreview(r, domain)
	if !ok || !t.hostForm || !e2b.SandboxPort(t.port) {
		return nil, false
	}
	r = withE2BPrefix(r)
	r.Header.Set("E2b-Sandbox-Id", t.id)
	r.Header.Set("E2b-Sandbox-Port", strconv.Itoa(t.port))
	return r, true
}

// withE2BPrefix is a copy of r with its path under /e2b.
func withE2BPrefix(r *http.Request) *http.Request {
	r = r.Clone(r.Context())
	r.URL.Path = e2b.Prefix + r.URL.Path
	r.URL.RawPath = ""
	return r
}
