package server

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/e2b"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// serveE2B serves E2B's protocol under /e2b (internal/e2b, docs/e2b.md)
// through the daemon's E2BEntry.
func (s *Server) serveE2B(w http.ResponseWriter, r *http.Request) {
	s.e2bEntry.ServeHTTP(w, r)
}

// E2BTrafficTokenHeader is the header in which E2B's users send the
// sandbox's trafficAccessToken (an API key here) to reach a port of it
// by host name (sbx.getHost); a preview request may carry it in place of
// Authorization.
const E2BTrafficTokenHeader = e2bTrafficToken

// E2BEntry is the door of E2B's protocol (internal/e2b, docs/e2b.md), for
// a daemon and a fleet gateway alike. E2B's SDKs send the key as
// X-API-KEY (control plane) or X-Access-Token (in the sandbox, where
// Authorization names a Linux user), so the key is checked from there;
// then the request is treated as any other of that key's: rate limit,
// audit, and every call it makes of the API goes through Client, acting
// as that key: a daemon's routes in process, or a gateway's, which place
// and route each call as any client's.
type E2BEntry struct {
	// Handler serves the protocol.
	Handler *e2b.Handler
	// Auth checks the key.
	Auth *auth.Authenticator
	// Limiter is the per-key rate limit; nil: none.
	Limiter *RateLimiter
	// Client returns the client that acts as p.
	Client func(p auth.Principal) *client.Client
	// Audit records the request; nil: not recorded.
	Audit func(r *http.Request, keyID, tenant string, status int)
}

// ServeHTTP serves one E2B request: r as E2BHost returns it, or one
// whose path is under e2b.Prefix.
func (e *E2BEntry) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	w = sw
	audit := func(keyID, tenant string) {
		if e.Audit != nil {
			e.Audit(r, keyID, tenant, sw.status)
		}
	}
	var l *limiter
	if e.Limiter != nil {
		l = e.Limiter.l
	}
	ar := r.Clone(r.Context())
	ar.Header.Set("Authorization", "Bearer "+e.Handler.Credential(r))
	p, err := e.Auth.Authenticate(r.Context(), ar)
	if err != nil {
		if ok, _ := l.allow("addr:"+remoteHost(r), start); ok {
			e2b.Unauthenticated(w, r, err.Error())
		} else {
			w.Header().Set("Retry-After", "1")
			e2b.RateLimited(w, r, "too many requests without a valid API key from "+remoteHost(r)+"; slow down")
		}
		audit("", "")
		return
	}
	if ok, wait := l.allow("key:"+p.KeyID, start); !ok && !p.Admin {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		e2b.RateLimited(w, r, "rate limit of API key "+p.KeyID+" exceeded; retry in "+wait.Round(time.Millisecond).String())
		audit(p.KeyID, p.Tenant)
		return
	}
	metrics.NoteTenant(r.Context(), p.Tenant)
	r = r.WithContext(tenancy.With(r.Context(), p))
	e.Handler.Serve(w, r, e.Client(p))
	audit(p.KeyID, p.Tenant)
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
	return E2BHost(r, s.svc.PreviewDomain())
}

// E2BHost is e2bHost with the preview domain given, for a fleet gateway,
// which serves E2B's host names as a daemon does.
func E2BHost(r *http.Request, domain string) (*http.Request, bool) {
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
