// Package e2b serves E2B's protocol on top of agentbox, so that the
// unmodified `e2b` and `@e2b/code-interpreter` SDKs work against a
// self-hosted daemon (docs/e2b.md). It speaks E2B's control plane (create,
// connect, list, kill, timeout, pause) and the in-sandbox API of E2B's envd
// (the Connect RPC services process.Process and filesystem.Filesystem, and
// /files and /health), and translates every call into calls of agentbox's
// own HTTP API made in process through a Go SDK client that acts as the
// caller's key: an E2B call has exactly the rights of the same REST call,
// and nothing here touches a sandbox directly.
//
// The server mounts one Handler under Prefix and hands it, per request,
// a client bound to the authenticated key (internal/server/e2b.go).
package e2b

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/client"
)

// Prefix is the path under which the daemon serves the E2B protocol:
// users set E2B_API_URL and E2B_SANDBOX_URL to http(s)://HOST:PORT/e2b.
const Prefix = "/e2b"

// EnvdVersion is the envd version reported to the SDKs: the version of
// E2B's envd whose protocol this package speaks. The SDKs gate features on
// it (none of the legacy branches apply from 0.6.4 on).
const EnvdVersion = "0.6.13"

// The ports E2B's SDKs name in the E2b-Sandbox-Port header.
const (
	envdPort        = "49983"
	interpreterPort = "49999"
)

// SandboxPort reports whether port is one E2B's SDKs address in a sandbox
// by host name (<port>-<id>.<domain>) and this package serves: envd's or
// the code interpreter's. Other ports are the sandbox's own.
func SandboxPort(port int) bool {
	p := strconv.Itoa(port)
	return p == envdPort || p == interpreterPort
}

// Handler serves E2B's protocol. Everything it answers comes from the
// agentbox API; its only state is the PTY attachments of the pty.create
// calls in progress (pty.go).
type Handler struct {
	log *slog.Logger
	// aliases maps E2B template names to agentbox templates.
	aliases map[string]string
	ptys    ptys
	// signed remembers the tokens handed out, to check signed URLs
	// (signed.go).
	signed signers
}

// Options configure a Handler.
type Options struct {
	Logger *slog.Logger
	// TemplateAliases maps an E2B templateID to an agentbox template name;
	// a templateID with no alias is taken as an agentbox template name.
	TemplateAliases map[string]string
}

// DefaultTemplateAliases are the aliases a Handler has unless its options
// replace them: E2B's code interpreter template runs on agentbox's python
// template.
var DefaultTemplateAliases = map[string]string{
	"code-interpreter-v1": "python",
}

// New returns a Handler.
func New(o Options) *Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.TemplateAliases == nil {
		o.TemplateAliases = DefaultTemplateAliases
	}
	return &Handler{log: o.Logger, aliases: o.TemplateAliases}
}

// Match reports whether r is an E2B request: its path is under Prefix.
func Match(r *http.Request) bool {
	return r.URL.Path == Prefix || strings.HasPrefix(r.URL.Path, Prefix+"/")
}

// Key returns the credential an E2B request carries: the API key of a
// control-plane call (X-API-KEY), or the envd access token of a sandbox
// call (X-Access-Token), or the traffic access token that the code
// interpreter's SDK sends where it sends no envd token (/contexts); both
// tokens are the same key (see sandboxOf).
func Key(r *http.Request) string {
	for _, h := range []string{"X-API-KEY", "X-Access-Token", "E2B-Traffic-Access-Token"} {
		if k := r.Header.Get(h); k != "" {
			return k
		}
	}
	return ""
}

// Credential returns the key r acts as: Key(r) or, for a signed /files
// URL of a sandbox (sbx.uploadUrl, sbx.downloadUrl), the key whose token
// signed it; "" if none.
func (h *Handler) Credential(r *http.Request) string {
	if k := Key(r); k != "" {
		return k
	}
	if id := r.Header.Get("E2b-Sandbox-Id"); id != "" && strings.TrimPrefix(r.URL.Path, Prefix) == "/files" &&
		(r.Method == http.MethodGet || r.Method == http.MethodPost) {
		return h.signed.signer(r, id, time.Now())
	}
	return ""
}

type hostDomainKey struct{}

// WithHostDomain marks a request that reached the control plane at
// api.<domain> (E2B_DOMAIN=<domain> alone): create and connect then
// answer domain as the sandbox hosts' domain, so that the SDK reaches the
// sandboxes the way it reached the API.
func WithHostDomain(ctx context.Context, domain string) context.Context {
	return context.WithValue(ctx, hostDomainKey{}, domain)
}

// Unauthenticated answers a request whose key was refused, in the shape
// the part of the protocol it addressed expects.
func Unauthenticated(w http.ResponseWriter, r *http.Request, msg string) {
	if isEnvd(r) && isRPC(r) {
		writeConnectUnaryError(w, connectError{Code: "unauthenticated", Message: msg})
		return
	}
	writeError(w, http.StatusUnauthorized, msg)
}

// Serve serves one E2B request with c, a client acting as the caller's
// key.
func (h *Handler) Serve(w http.ResponseWriter, r *http.Request, c *client.Client) {
	path := strings.TrimPrefix(r.URL.Path, Prefix)
	if path == "" {
		path = "/"
	}
	if isEnvd(r) {
		h.serveSandbox(w, r, c, path)
		return
	}
	h.serveControl(w, r, c, path)
}

// isEnvd reports whether r addresses a sandbox (envd or the code
// interpreter) rather than the control plane: the SDKs name the sandbox
// in E2b-Sandbox-Id on every such request, and only on those.
func isEnvd(r *http.Request) bool {
	return r.Header.Get("E2b-Sandbox-Id") != ""
}

func isRPC(r *http.Request) bool {
	p := strings.TrimPrefix(r.URL.Path, Prefix)
	return strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")
}

// RateLimited answers a request the server's rate limit turns away, in the
// shape its part of the protocol expects (the SDKs raise RateLimitError).
func RateLimited(w http.ResponseWriter, r *http.Request, msg string) {
	if isEnvd(r) && isRPC(r) {
		writeConnectUnaryError(w, connectError{Code: "resource_exhausted", Message: msg})
		return
	}
	writeError(w, http.StatusTooManyRequests, msg)
}
