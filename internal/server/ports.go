package server

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// The preview proxy serves a sandbox's ports in two forms:
//
//	http://<port>-<id>.<preview_domain>/...   (Host routing)
//	/v1/sandboxes/<id>/ports/<port>/...       (on the API)
//
// It dials 127.0.0.1:<port> inside the sandbox through the guest agent
// (proto.Dial.Path), so loopback-only servers are reachable and nothing
// of the sandbox's own network is involved. Access is public or needs the
// sandbox's preview token (header, query or cookie); an API key of the
// sandbox's tenant works too. HTTP/1.1, streamed responses, SSE and
// WebSocket upgrades pass through httputil.ReverseProxy.

// e2bTrafficToken is the header in which E2B's users send a sandbox's
// trafficAccessToken, an API key here, to reach its ports.
const e2bTrafficToken = "E2b-Traffic-Access-Token"

// previewTarget is what a preview request asks for.
type previewTarget struct {
	id       string
	port     int
	hostForm bool
	prefix   string // path prefix to strip (path form)
}

// previewOf says whether r is a preview request.
func (s *Server) previewOf(r *http.Request) (previewTarget, bool) {
	return parsePreview(r, s.svc.PreviewDomain())
}

// parsePreview reads a preview target from r's Host (under domain) or
// its path.
func parsePreview(r *http.Request, domain string) (previewTarget, bool) {
	host := strings.ToLower(r.Host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	if label, ok := strings.CutSuffix(host, "."+domain); ok && !strings.Contains(label, ".") {
		p, id, ok := strings.Cut(label, "-")
		if port, err := strconv.Atoi(p); ok && err == nil && id != "" {
			return previewTarget{id: id, port: port, hostForm: true}, true
		}
	}
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/sandboxes/")
	if !ok {
		return previewTarget{}, false
	}
	parts := strings.SplitN(rest, "/", 4) // id, "ports", port, path
	if len(parts) < 3 || parts[1] != "ports" || parts[0] == "" {
		return previewTarget{}, false
	}
	port, err := strconv.Atoi(parts[2])
	if err != nil {
		return previewTarget{}, false
	}
	return previewTarget{id: parts[0], port: port, prefix: "/v1/sandboxes/" + parts[0] + "/ports/" + parts[2]}, true
}

// servePreview proxies a preview request after checking access.
func (s *Server) servePreview(w http.ResponseWriter, r *http.Request, t previewTarget) {
	if t.port < 1 || t.port > 65535 {
		writeError(w, errdefs.Invalid("port must be 1-65535, got %d", t.port))
		return
	}
	tenantOf, n, err := s.svc.Preview(r.Context(), t.id)
	if err != nil {
		writeError(w, err)
		return
	}
	fromQuery, usedKey, err := s.previewAccess(r, tenantOf, n)
	if err != nil {
		writeError(w, err)
		return
	}
	if fromQuery && t.hostForm {
		// Later requests of the page (assets, XHR) carry no query: a
		// cookie scoped to this preview host stands in for the token.
		http.SetCookie(w, &http.Cookie{Name: api.PreviewTokenCookie, Value: n.PreviewToken, Path: "/",
			HttpOnly: true, SameSite: http.SameSiteLaxMode})
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = "http"
			pr.Out.URL.Host = t.id + ":" + strconv.Itoa(t.port)
			if !t.hostForm {
				pr.Out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, t.prefix), "/")
				pr.Out.URL.RawPath = ""
				pr.Out.Host = "localhost:" + strconv.Itoa(t.port)
			} else {
				pr.Out.Host = pr.In.Host
			}
			stripPreviewCredentials(pr.Out, usedKey || !t.hostForm)
			pr.SetXForwarded()
		},
		Transport:     s.previewTransport(),
		FlushInterval: -1, // SSE and streamed bodies go out as they come
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) {
				return // the client went away
			}
			var e *errdefs.Error
			if errors.As(err, &e) {
				writeError(w, err)
				return
			}
			writeError(w, errdefs.New(errdefs.ErrUnavailable, "sandbox %s port %d: %v", t.id, t.port, err))
		},
	}
	// Full duplex, as the gateway's proxy (internal/gateway, node.serve):
	// an app that answers before it has read the whole request (a
	// streamed upload, a bidirectional stream) gets the rest of the body,
	// not a server that drops it once the answer has begun.
	_ = http.NewResponseController(w).EnableFullDuplex()
	rp.ServeHTTP(w, r)
}

// previewAccess checks the sandbox's preview mode against r's
// credentials. It reports whether the token came in the query, and
// whether an API key was used (and so must not reach the sandbox).
func (s *Server) previewAccess(r *http.Request, tenantOf string, n api.Network) (fromQuery, usedKey bool, err error) {
	if n.Preview == api.PreviewPublic {
		return false, false, nil
	}
	want := []byte(n.PreviewToken)
	ok := func(v string) bool {
		return v != "" && len(want) > 0 && subtle.ConstantTimeCompare([]byte(v), want) == 1
	}
	if ok(r.Header.Get(api.PreviewTokenHeader)) {
		return false, false, nil
	}
	if ok(r.URL.Query().Get(api.PreviewTokenQuery)) {
		return true, false, nil
	}
	if c, err := r.Cookie(api.PreviewTokenCookie); err == nil && ok(c.Value) {
		return false, false, nil
	}
	if tok := r.Header.Get(e2bTrafficToken); tok != "" {
		// E2B's SDKs hand out the key as the trafficAccessToken, which
		// E2B's users send in this header to reach a sandbox's port
		// (sbx.getHost): it is an API key (docs/e2b.md).
		ar := r.Clone(r.Context())
		ar.Header.Set("Authorization", "Bearer "+tok)
		r = ar
	}
	if r.Header.Get("Authorization") != "" {
		p, err := s.auth.Authenticate(r.Context(), r)
		if err != nil {
			return false, false, err
		}
		if p.Admin || p.Tenant == tenantOf {
			return false, true, nil
		}
		return false, false, errdefs.NotFound("sandbox not found")
	}
	return false, false, errdefs.New(errdefs.ErrUnauthenticated,
		"this preview needs the sandbox's token: send header %s or query ?%s= (see `agentbox url`)", api.PreviewTokenHeader, api.PreviewTokenQuery)
}

// stripPreviewCredentials removes agentbox's credentials from a request
// bound for the sandbox: the token in every form and, when it was the
// API key, the Authorization header.
func stripPreviewCredentials(out *http.Request, dropAuthorization bool) {
	out.Header.Del(api.PreviewTokenHeader)
	out.Header.Del(e2bTrafficToken)
	if dropAuthorization {
		out.Header.Del("Authorization")
	}
	if q := out.URL.Query(); q.Has(api.PreviewTokenQuery) {
		q.Del(api.PreviewTokenQuery)
		out.URL.RawQuery = q.Encode()
	}
	if cookies := out.Cookies(); len(cookies) > 0 {
		out.Header.Del("Cookie")
		for _, c := range cookies {
			if c.Name != api.PreviewTokenCookie {
				out.AddCookie(c)
			}
		}
	}
}

// previewTransport is the proxy's transport: "host:port" of the outgoing
// URL is "<id>:<port>", dialled through the guest agent. Idle connections
// are kept per sandbox and port.
func (s *Server) previewTransport() http.RoundTripper {
	s.previewOnce.Do(func() {
		s.previewRT = &http.Transport{
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				id, p, err := net.SplitHostPort(addr)
				if err != nil {
					return nil, err
				}
				port, _ := strconv.Atoi(p)
				return s.svc.DialPort(ctx, id, port)
			},
			MaxIdleConnsPerHost:   8,
			IdleConnTimeout:       30 * time.Second,
			ResponseHeaderTimeout: 0, // a slow server is the sandbox's business
			DisableCompression:    true,
		}
	})
	return s.previewRT
}
