// Package gateway is the fleet gateway (`agentbox serve` with role =
// "gateway", docs/cluster.md): one API in front of several nodes. It
// authenticates tenants' keys against its own store, places a create on
// the best of a few available nodes, forwards everything under
// /v1/sandboxes/{id} to the node the id names (a sandbox id starts with
// its node's node_id), merges the lists of every node, and routes preview
// hosts. It keeps no sandbox state: membership is the static list of
// [[fleet.node]], polled every poll_interval (members.go). Nodes trust it
// through the fleet secret (internal/auth/gateway.go).
package gateway

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/metrics"
	"github.com/agentbox/agentbox/internal/server"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
	"github.com/agentbox/agentbox/internal/version"
)

// Options wire a gateway.
type Options struct {
	// Nodes is the static membership ([[fleet.node]]).
	Nodes []config.FleetNode
	// Key is the fleet secret sent to every node (fleet.key_file).
	Key string
	// PollInterval is how often each node's GET /v1/node is read;
	// Candidates the K of best-of-K placement.
	PollInterval time.Duration
	Candidates   int
	// Store and Auth hold and check the tenants and API keys.
	Store *store.Store
	Auth  *auth.Authenticator
	// MaxBodyBytes bounds the JSON bodies the gateway reads (a create's is
	// kept for its retries).
	MaxBodyBytes int64
	// PreviewDomain is the domain of the preview hosts
	// <port>-<id>.<domain>; the nodes need the same one.
	PreviewDomain string
	// RateLimit and RateBurst are the per-key token bucket, as on a node.
	RateLimit float64
	RateBurst int
	// E2BTemplateAliases maps E2B templateIDs to templates, as on a node
	// ([e2b] template_aliases); nil: e2b.DefaultTemplateAliases.
	E2BTemplateAliases map[string]string
	// Info is the gateway's own GET /v1/info, less what changes.
	Info   api.Info
	Logger *slog.Logger
	// Transport reaches the nodes; nil: a transport of its own.
	Transport http.RoundTripper
	// Shared, when set, gets every tenant and key write made in Store:
	// the cluster that gateway replicas share them through (tenants.go).
	Shared SharedTenants
	// Registry is the fleet's OCI registry, HOST:PORT/PREFIX
	// (fleet.registry): templates pulled on first use, spread forks and
	// creates from a snapshot elsewhere go through it (move.go). "":
	// none.
	Registry string
}

// Gateway is the fleet gateway's HTTP handler.
type Gateway struct {
	o       Options
	mem     atomic.Pointer[membership]        // members.go
	catalog atomic.Pointer[map[string]string] // catalog.go
	memMu   sync.Mutex                        // serialises SetMembers
	ctx     context.Context                   // Start's, for polling new members
	rt      http.RoundTripper
	client  *http.Client
	fr      fronts // E2B and MCP (e2b.go)
	mux     *http.ServeMux
	limiter *server.RateLimiter
	log     *slog.Logger
	mv      moves
	pushes  pushQueue // background pushes (pushq.go)

	stop context.CancelFunc
	done chan struct{}
}

// New returns a gateway; Start begins polling the nodes.
func New(o Options) (*Gateway, error) {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second
	}
	if o.Candidates < 1 {
		o.Candidates = 3
	}
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	if len(o.Key) < config.MinFleetKeyLen {
		return nil, errdefs.Invalid("the fleet key must be at least %d characters", config.MinFleetKeyLen)
	}
	g := &Gateway{o: o, log: o.Logger, mux: http.NewServeMux(),
		limiter: server.NewRateLimiter(o.RateLimit, o.RateBurst)}
	g.mem.Store(&membership{byID: map[string]*node{}})
	g.rt = o.Transport
	if g.rt == nil {
		g.rt = newTransport(g.trustFor)
	}
	g.client = &http.Client{Transport: g.rt}
	static := make([]Member, len(o.Nodes))
	for i, c := range o.Nodes {
		static[i] = Member{FleetNode: c, Source: SourceConfig}
	}
	if err := g.SetMembers(static); err != nil {
		return nil, err
	}
	g.routes()
	g.initFronts()
	return g, nil
}

// newTransport is the transport to the nodes: many idle connections per
// node (every tenant's requests share them), no compression (streams go
// through as they come), and over TLS each node's own trust (its pinned
// certificate or its ca_file; else the system's roots), chosen by the
// address dialled.
func newTransport(trust func(addr string) *tls.Config) *http.Transport {
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	return &http.Transport{
		Proxy:       nil,
		DialContext: dialer.DialContext,
		DialTLSContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			host, _, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			tc := trust(addr)
			if tc == nil {
				tc = &tls.Config{MinVersion: tls.VersionTLS12}
			}
			tc = tc.Clone()
			tc.ServerName = host
			raw, err := dialer.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			conn := tls.Client(raw, tc)
			if err := conn.HandshakeContext(hctx); err != nil {
				raw.Close()
				return nil, err
			}
			return conn, nil
		},
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
}

// hostPort is u's host with its port, the scheme's default when u names
// none: the address the transport dials.
func hostPort(u *url.URL) string {
	if u.Port() != "" {
		return u.Host
	}
	if u.Scheme == "https" {
		return net.JoinHostPort(u.Hostname(), "443")
	}
	return net.JoinHostPort(u.Hostname(), "80")
}

// Start polls every node once (so that the gateway places sandboxes from
// its first request), then every PollInterval until Close.
func (g *Gateway) Start(ctx context.Context) {
	ctx, g.stop = context.WithCancel(context.WithoutCancel(ctx))
	g.done = make(chan struct{})
	g.memMu.Lock()
	g.ctx = ctx
	g.memMu.Unlock()
	g.pollAll(ctx)
	go func() {
		defer close(g.done)
		g.run(ctx)
	}()
}

// Close stops the polling.
func (g *Gateway) Close() {
	if g.stop != nil {
		g.stop()
		<-g.done
	}
}

// ServeHTTP routes preview hosts to their node, authenticates every other
// request against the gateway's store, then serves it.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rid := w.Header().Get(metrics.RequestIDHeader); rid != "" {
		r.Header.Set(metrics.RequestIDHeader, rid) // the node logs the same id
	}
	if er, ok := g.e2bRequest(r); ok { // E2B's hosts and /e2b (e2b.go)
		g.fr.e2b.ServeHTTP(w, er)
		return
	}
	if id, ok := server.PreviewTarget(r, g.o.PreviewDomain); ok {
		g.servePreview(w, r, id)
		return
	}
	start := time.Now()
	p, err := g.o.Auth.Authenticate(r.Context(), r)
	if err != nil {
		if ok, _ := g.limiter.Allow("addr:" + remoteHost(r)); ok {
			server.WriteError(w, err)
		} else {
			server.WriteError(w, errdefs.Exhausted("too many requests without a valid API key from %s; slow down", remoteHost(r)))
		}
		return
	}
	if ok, wait := g.limiter.Allow("key:" + p.KeyID); !ok && !p.Admin {
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		server.WriteError(w, errdefs.Exhausted("rate limit of API key %s exceeded; retry in %v", p.KeyID, wait.Round(time.Millisecond)))
		return
	}
	metrics.NoteTenant(r.Context(), p.Tenant)
	r = r.WithContext(tenancy.With(r.Context(), p))
	g.mux.ServeHTTP(w, r)
	if g.log.Enabled(r.Context(), slog.LevelDebug) {
		g.log.Debug("request", "method", r.Method, "path", r.URL.Path, "tenant", p.Tenant, "took", time.Since(start))
	}
}

// principal is whom r acts for (set by ServeHTTP).
func principal(r *http.Request) auth.Principal {
	p, err := tenancy.From(r.Context())
	if err != nil {
		return auth.Principal{Tenant: "\x00no principal"} // sees nothing
	}
	return p
}

func remoteHost(r *http.Request) string {
	h, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return h
}

// own are the routes the gateway serves itself (the rest of api.Routes
// under /v1/sandboxes/{id} is forwarded, any other answers 501).
func (g *Gateway) own() map[string]http.HandlerFunc {
	handlers := map[string]http.HandlerFunc{
		"GET /v1/health":             g.health,
		"GET /v1/info":               g.info,
		"GET /v1/fleet/nodes":        g.fleetNodes,
		"POST /v1/sandboxes":         g.create,
		"GET /v1/sandboxes":          g.listSandboxes,
		"GET /v1/templates":          g.listTemplates,
		"GET /v1/templates/{name}":   g.getTemplate,
		"GET /v1/snapshots":          g.listSnapshots,
		"GET /v1/pools":              g.listPools,
		"GET /v1/snapshots/{ref}":    g.snapshotByRef,
		"DELETE /v1/snapshots/{ref}": g.snapshotByRef,
		// The snapshot's node pushes it (internal/registry).
		"POST /v1/snapshots/{ref}/push": g.snapshotByRef,
		// With spread, children on several nodes (fork.go); else the
		// parent's node forks.
		"POST /v1/sandboxes/{id}/fork": g.fork,
		// Template writes: made on one node, removed from every node.
		"POST /v1/templates/build":    g.templateWrite,
		"POST /v1/templates/import":   g.templateWrite,
		"DELETE /v1/templates/{name}": g.deleteTemplate,
	}
	// Keys and tenants: internal/server's own handlers, on this store,
	// and with Shared in the cluster too (tenants.go).
	admin := server.AdminRoutes(server.Options{Store: g.o.Store, Logger: g.log, MaxBodyBytes: g.o.MaxBodyBytes})
	g.shareTenants(admin)
	for pattern, h := range admin {
		handlers[pattern] = h
	}
	for pattern, h := range g.mcpRoutes() { // e2b.go
		handlers[pattern] = h
	}
	return handlers
}

// forwarded reports whether route goes to the node its id names.
func forwarded(rt api.Route) bool {
	return rt.Path == api.SandboxPrefix || strings.HasPrefix(rt.Path, api.SandboxPrefix+"/")
}

func (g *Gateway) routes() {
	handlers := g.own()
	for _, rt := range api.Routes {
		p := rt.Pattern()
		if h, ok := handlers[p]; ok {
			g.mux.HandleFunc(p, h)
			delete(handlers, p)
			continue
		}
		if !forwarded(rt) {
			g.mux.HandleFunc(p, notServed(p))
		}
	}
	for p := range handlers {
		panic("gateway: a handler for " + p + ", which is not in api.Routes (api/routes.go)")
	}
	// Everything under a sandbox goes to its node, whatever the route:
	// the node answers for the routes it has.
	g.mux.HandleFunc("/v1/sandboxes/{id}", g.forwardSandbox)
	g.mux.HandleFunc("/v1/sandboxes/{id}/", g.forwardSandbox)
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		for _, pre := range notServedPrefixes {
			if r.URL.Path == pre || strings.HasPrefix(r.URL.Path, pre+"/") {
				server.WriteError(w, errdefs.New(errdefs.ErrUnimplemented, "%s is not served through a fleet gateway yet; call a node directly (docs/cluster.md, \"What the gateway serves\")", pre))
				return
			}
		}
		server.WriteError(w, errdefs.NotFound("no route for %s %s; see api/openapi.yaml", r.Method, r.URL.Path))
	})
}

// notServedPrefixes are the node's entry points outside api.Routes that a
// gateway does not serve yet.
var notServedPrefixes = []string{"/console"}

// NotServed lists the routes of api.Routes a gateway answers 501, for
// docs/cluster.md (a test holds the two equal).
func NotServed() []string {
	own := (&Gateway{}).own()
	var out []string
	for _, rt := range api.Routes {
		if _, ok := own[rt.Pattern()]; !ok && !forwarded(rt) {
			out = append(out, rt.Pattern())
		}
	}
	return out
}

func notServed(pattern string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		server.WriteError(w, errdefs.New(errdefs.ErrUnimplemented,
			"%s is not served through a fleet gateway yet; call a node directly until it is (docs/cluster.md, \"What the gateway serves\")", pattern))
	}
}

func (g *Gateway) health(w http.ResponseWriter, r *http.Request) {
	tiers, sandboxes := g.fleetTiers()
	var drivers []string
	for _, t := range tiers {
		if t.Available {
			drivers = append(drivers, t.Name)
		}
	}
	if drivers == nil {
		drivers = []string{}
	}
	server.WriteJSON(w, http.StatusOK, api.Health{Status: "ok", Version: version.Version, Drivers: drivers, Sandboxes: sandboxes})
}

// fleetTiers merges the available nodes' tiers (a tier is available when
// one node runs it) and sums their sandboxes.
func (g *Gateway) fleetTiers() ([]api.Tier, int) {
	var tiers []api.Tier
	idx := map[string]int{}
	sandboxes := 0
	for _, n := range g.available() {
		n.mu.Lock()
		st := n.status
		n.mu.Unlock()
		if st == nil {
			continue
		}
		sandboxes += st.Sandboxes
		for _, t := range st.Tiers {
			i, ok := idx[t.Name]
			if !ok {
				idx[t.Name] = len(tiers)
				t.Default = t.Name == g.o.Info.DefaultIsolation
				tiers = append(tiers, t)
				continue
			}
			if t.Available && !tiers[i].Available {
				tiers[i].Available, tiers[i].Error = true, ""
			}
		}
	}
	return tiers, sandboxes
}

func (g *Gateway) info(w http.ResponseWriter, r *http.Request) {
	out := g.o.Info
	out.Version = version.Version
	out.Role = "gateway"
	out.Tiers, out.Sandboxes = g.fleetTiers()
	if out.Tiers == nil {
		out.Tiers = []api.Tier{}
	}
	out.Nodes = &api.FleetSummary{Total: len(g.members().nodes), Available: len(g.available())}
	if !principal(r).Admin {
		out.DataDir, out.RunDir, out.Socket, out.Listen, out.Log = "", "", "", "", ""
	}
	server.WriteJSON(w, http.StatusOK, out)
}

func (g *Gateway) fleetNodes(w http.ResponseWriter, r *http.Request) {
	if !principal(r).Admin {
		server.WriteError(w, errdefs.New(errdefs.ErrPermissionDenied, "the fleet's membership needs an admin key"))
		return
	}
	server.WriteJSON(w, http.StatusOK, api.ListFleetNodesResponse{Nodes: g.Nodes()})
}
