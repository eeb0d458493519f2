package server

import (
	"bufio"
	"bytes"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/version"
)

// The fleet routes of a node (docs/cluster.md): GET /v1/node, what a
// gateway polls to place sandboxes. GET /v1/fleet/nodes is a gateway's
// route (internal/gateway); a node answers it 501.

// nodeStatus serves GET /v1/node.
func (s *Server) nodeStatus(w http.ResponseWriter, r *http.Request) {
	if !requireAdmin(w, r, "the node status") {
		return
	}
	out := api.NodeStatus{
		NodeID:    s.info.NodeID,
		Version:   version.Version,
		Tiers:     slices.Clone(s.info.Tiers),
		Sandboxes: s.svc.LiveCount(),
		CPUs:      runtime.NumCPU(),
		Templates: []string{},
	}
	out.Load1 = load1()
	out.MemoryTotalMB, out.MemoryAvailableMB = meminfo()
	if s.tpl != nil {
		tpls, err := s.tpl.List(r.Context()) // the admin's: every template
		if err != nil {
			writeError(w, err)
			return
		}
		for _, t := range tpls {
			if !slices.Contains(out.Templates, t.Name) {
				out.Templates = append(out.Templates, t.Name)
			}
		}
		slices.Sort(out.Templates)
	}
	writeJSON(w, http.StatusOK, out)
}

// fleetNodes answers GET /v1/fleet/nodes on a node.
func (s *Server) fleetNodes(w http.ResponseWriter, r *http.Request) {
	writeError(w, errdefs.New(errdefs.ErrUnimplemented, "GET /v1/fleet/nodes is a fleet gateway's route; this daemon is a node (role = \"node\"): ask the gateway (docs/cluster.md)"))
}

// load1 is the host's 1-minute load average (0 when unreadable).
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _, _ := strings.Cut(string(b), " ")
	v, _ := strconv.ParseFloat(f, 64)
	return v
}

// meminfo returns MemTotal and MemAvailable of /proc/meminfo in MiB (0
// when unreadable).
func meminfo() (total, available int64) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0
	}
	return parseMeminfo(b)
}

func parseMeminfo(b []byte) (total, available int64) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			continue
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "MemTotal":
			total = kb >> 10
		case "MemAvailable":
			available = kb >> 10
		}
	}
	return total, available
}

// fleetHandlers are the routes this file serves (registered by routes,
// server.go, from api.Routes).
func (s *Server) fleetHandlers() map[string]http.HandlerFunc {
	return map[string]http.HandlerFunc{
		"GET /v1/node":        s.nodeStatus,
		"GET /v1/fleet/nodes": s.fleetNodes,
	}
}

// AdminRoutes are the API key and tenant routes (admin.go), built on a
// store alone, for a fleet gateway (internal/gateway), which keeps tenants
// and keys in a store of its own and no sandbox. Each handler reads the
// principal from the request's context (tenancy.With), which the caller
// sets after authenticating the request. o needs Store, and Logger and
// MaxBodyBytes as New takes them; the rest is unused.
func AdminRoutes(o Options) map[string]http.HandlerFunc {
	if o.MaxBodyBytes <= 0 {
		o.MaxBodyBytes = 1 << 20
	}
	s := &Server{st: o.Store, log: o.Logger, maxBody: o.MaxBodyBytes}
	all := s.adminHandlers()
	out := map[string]http.HandlerFunc{}
	for pattern, h := range all {
		if strings.Contains(pattern, "/v1/keys") || strings.Contains(pattern, "/v1/tenants") {
			out[pattern] = h
		}
	}
	return out
}

// WriteError answers err as the API does: {"error": {code, message,
// request_id}} with the status of its errdefs class.
func WriteError(w http.ResponseWriter, err error) { writeError(w, err) }

// WriteJSON answers v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) { writeJSON(w, status, v) }

// RateLimiter is the API's per-key token bucket (ratelimit.go), for a
// fleet gateway, which limits the keys it authenticates as a node does.
type RateLimiter struct{ l *limiter }

// NewRateLimiter returns the limiter of security.rate_limit and
// rate_burst; rate 0: no limit.
func NewRateLimiter(rate float64, burst int) *RateLimiter {
	return &RateLimiter{l: newLimiter(rate, burst)}
}

// Allow takes a token from key's bucket; when none is left it reports
// false and how long until one is.
func (r *RateLimiter) Allow(key string) (bool, time.Duration) {
	return r.l.allow(key, time.Now())
}

// PreviewTarget reports whether r is a preview request, in the host form
// (<port>-<id>.<domain>) or the path form (/v1/sandboxes/<id>/ports/...),
// and for which sandbox: what a fleet gateway routes by id without
// authenticating (the node checks the preview's token or key).
func PreviewTarget(r *http.Request, domain string) (id string, ok bool) {
	t, ok := parsePreview(r, domain)
	return t.id, ok
}
