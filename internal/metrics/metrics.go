// Package metrics is agentbox's Prometheus exposition (GET /metrics, the
// official client_golang library) and its per-request observation: every
// API request gets a request id (the X-Request-Id header, and request_id
// in every error body), one structured log line, and, for the sandbox
// operations (create, destroy, exec, file transfers, fork, snapshot,
// reset, pause, resume), a count and a latency by template, tier and
// outcome. Gauges (live sandboxes, warm pools, host resources left) are
// read when Prometheus scrapes, so they cost nothing between scrapes.
//
// Label sets are bounded: never a sandbox id, a path or a key; templates
// and tenants are capped (see maxValues) and the rest count as "other".
package metrics

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// maxValues caps the distinct values of a label that users choose
// (templates, tenants); later ones are counted as "other".
const maxValues = 64

// Sandboxes is what the metrics read of the sandbox service.
type Sandboxes interface {
	List(ctx context.Context, scope tenancy.Scope, f sandbox.ListFilter) ([]api.Sandbox, error)
	Pools() []api.PoolStatus
}

// Network is what the metrics read of the network manager.
type Network interface {
	EgressDecisions() []network.EgressDecision
	SubnetsFree() int
}

// Options wire the metrics.
type Options struct {
	Sandboxes Sandboxes
	Network   Network // nil: no egress or subnet metrics
	Events    *events.Hub
	// Auth checks admin keys on GET /metrics; ScrapeToken is the
	// alternative bearer token ("" for none).
	Auth        *auth.Authenticator
	ScrapeToken string
	// DataDir is where host disk left is measured (its storage pool).
	DataDir string
	// UIDRanges counts the sandbox uid ranges left (uid_ranges); nil
	// without them.
	UIDRanges UIDRanges
	Logger    *slog.Logger
	// Tracer starts every request's span (internal/tracing); nil or a
	// no-op tracer when tracing is off.
	Tracer trace.Tracer
}

// UIDRanges is what the metrics read of the sandboxes' uid ranges
// (internal/idrange.Pool).
type UIDRanges interface {
	// Free is how many ranges are left to hand out.
	Free() int
}

// Metrics holds the registry and the families the daemon updates.
type Metrics struct {
	o   Options
	reg *prometheus.Registry
	log *slog.Logger

	ops      *prometheus.CounterVec
	opTime   *prometheus.HistogramVec
	requests *prometheus.CounterVec
	evs      *prometheus.CounterVec
	quota    *prometheus.CounterVec

	templates, tenants *bounded

	// routes finds a request's route pattern (api.Routes).
	routes routeTable

	// labels are the live sandboxes' template and tier, kept from the
	// events, so that an exec or a destroy is counted under them.
	mu     sync.Mutex
	labels map[string]sbLabels
}

type sbLabels struct{ template, tier string }

// New registers every family on a registry of its own and, with
// o.Events, starts counting events.
func New(o Options) *Metrics {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Tracer == nil {
		o.Tracer = noop.NewTracerProvider().Tracer("")
	}
	m := &Metrics{o: o, reg: prometheus.NewRegistry(), log: o.Logger,
		templates: newBounded(maxValues), tenants: newBounded(maxValues),
		routes: newRouteTable(), labels: map[string]sbLabels{}}
	m.ops = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_sandbox_operations_total",
		Help: "Sandbox operations answered by the API, by operation, template, tier and outcome (ok, rejected, exhausted, error).",
	}, []string{"operation", "template", "tier", "outcome"})
	m.opTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "agentbox_sandbox_operation_duration_seconds",
		Help:    "Time the API took to answer a sandbox operation (for streamed execs: the whole stream).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"operation", "template", "tier", "outcome"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_http_requests_total",
		Help: "API requests by route pattern and status code.",
	}, []string{"route", "code"})
	m.evs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_events_total",
		Help: "Lifecycle events by type (created, destroyed, failed: a guest that died, oom, ...).",
	}, []string{"type"})
	m.quota = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "agentbox_quota_rejections_total",
		Help: "Requests refused by a tenant's quota, by tenant.",
	}, []string{"tenant"})
	for _, t := range events.Types {
		m.evs.WithLabelValues(t) // present at 0 from the start
	}
	m.reg.MustRegister(m.ops, m.opTime, m.requests, m.evs, m.quota,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&stateCollector{m: m})
	if o.Sandboxes != nil {
		if list, err := o.Sandboxes.List(context.Background(), tenancy.AllTenants(), sandbox.ListFilter{}); err == nil {
			for _, sb := range list {
				m.labels[sb.ID] = sbLabels{sb.Template, sb.Isolation}
			}
		}
	}
	if o.Events != nil {
		o.Events.Observe(m.observeEvent)
	}
	return m
}

// Registry is the registry /metrics serves.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// observeEvent counts an event and keeps the sandbox labels (an
// events.Hub observer: quick, never blocks).
func (m *Metrics) observeEvent(e *events.Event) {
	m.evs.WithLabelValues(e.Type).Inc()
	switch e.Type {
	case events.QuotaRejected:
		m.quota.WithLabelValues(m.tenants.value(tenantLabel(e.Tenant))).Inc()
	case events.Created, events.Forked:
		m.mu.Lock()
		m.labels[e.Sandbox] = sbLabels{e.Template, e.Isolation}
		m.mu.Unlock()
	case events.Destroyed, events.Failed:
		m.mu.Lock()
		delete(m.labels, e.Sandbox)
		m.mu.Unlock()
	}
}

func tenantLabel(t string) string {
	if t == "" {
		return "default"
	}
	return t
}

// observeOp records one sandbox operation.
func (m *Metrics) observeOp(op, template, tier, outcome string, took time.Duration) {
	template = m.templates.value(template)
	m.ops.WithLabelValues(op, template, tier, outcome).Inc()
	m.opTime.WithLabelValues(op, template, tier, outcome).Observe(took.Seconds())
}

// labelsOf returns a live sandbox's template and tier ("" when unknown).
func (m *Metrics) labelsOf(id string) sbLabels {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.labels[id]
}

// bounded keeps at most max distinct values of a label.
type bounded struct {
	mu   sync.Mutex
	max  int
	seen map[string]bool
}

func newBounded(max int) *bounded { return &bounded{max: max, seen: map[string]bool{}} }

func (b *bounded) value(v string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.seen[v] {
		return v
	}
	if len(b.seen) >= b.max {
		return "other"
	}
	b.seen[v] = true
	return v
}
