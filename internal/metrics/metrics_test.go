package metrics

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/events"
	"github.com/agentbox/agentbox/internal/sandbox"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// fakeSandboxes is a hand-written stand-in for the sandbox service.
type fakeSandboxes struct{ list []api.Sandbox }

func (f *fakeSandboxes) List(context.Context, tenancy.Scope, sandbox.ListFilter) ([]api.Sandbox, error) {
	return f.list, nil
}

func (f *fakeSandboxes) Pools() []api.PoolStatus {
	return []api.PoolStatus{{Template: "base", Isolation: "container", Size: 4, Ready: 3, Booted: 7, Served: 5, Misses: 1}}
}

const token = "0123456789abcdef-token"

// fakeRanges is a uid range pool with n ranges left.
type fakeRanges int

func (f fakeRanges) Free() int { return int(f) }

func newTest(t *testing.T) (*Metrics, *events.Hub, http.Handler) {
	t.Helper()
	hub := events.New()
	src := &fakeSandboxes{list: []api.Sandbox{
		{ID: "aaaaaaaaaaaa", State: api.StateRunning, Isolation: "container", Template: "base"},
		{ID: "bbbbbbbbbbbb", State: api.StatePaused, Isolation: "gvisor", Template: "python"},
	}}
	m := New(Options{Sandboxes: src, Events: hub, ScrapeToken: token, DataDir: t.TempDir(), UIDRanges: fakeRanges(4093)})
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "POST" && r.URL.Path == "/v1/sandboxes":
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(api.Sandbox{ID: "cccccccccccc", Template: "base", Isolation: "container"})
		case strings.HasSuffix(r.URL.Path, "/exec"):
			w.WriteHeader(http.StatusOK)
		default:
			w.WriteHeader(http.StatusNotFound)
		}
	})
	return m, hub, m.Wrap(api)
}

func do(t *testing.T, h http.Handler, method, path, bearer string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(method, path, strings.NewReader("{}"))
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestOperationsAreCountedByLabels(t *testing.T) {
	m, _, h := newTest(t)
	if w := do(t, h, "POST", "/v1/sandboxes", ""); w.Code != http.StatusCreated {
		t.Fatalf("create: %d", w.Code)
	}
	// A sandbox known from the start (List) and a missing one.
	do(t, h, "POST", "/v1/sandboxes/bbbbbbbbbbbb/exec", "")
	do(t, h, "DELETE", "/v1/sandboxes/zzzzzzzzzzzz", "")
	tests := []struct {
		labels []string
		want   float64
	}{
		{[]string{"create", "base", "container", "ok"}, 1},
		{[]string{"exec", "python", "gvisor", "ok"}, 1},
		{[]string{"destroy", "", "", "rejected"}, 1},
	}
	for _, tt := range tests {
		if got := testutil.ToFloat64(m.ops.WithLabelValues(tt.labels...)); got != tt.want {
			t.Errorf("operations%v = %g, want %g", tt.labels, got, tt.want)
		}
	}
	if got := testutil.ToFloat64(m.requests.WithLabelValues("POST /v1/sandboxes", "201")); got != 1 {
		t.Errorf("requests{POST /v1/sandboxes, 201} = %g, want 1", got)
	}
}

func TestEventsKeepLabelsAndCountQuota(t *testing.T) {
	m, hub, h := newTest(t)
	hub.Publish(events.Event{Type: events.Created, Sandbox: "dddddddddddd", Template: "node", Isolation: "container", Tenant: "acme"})
	do(t, h, "POST", "/v1/sandboxes/dddddddddddd/exec", "")
	if got := testutil.ToFloat64(m.ops.WithLabelValues("exec", "node", "container", "ok")); got != 1 {
		t.Errorf("exec in a sandbox created after start: %g, want 1 under node/container", got)
	}
	// A destroy is counted under the sandbox's labels although its
	// destroyed event (published while the request runs) forgets them.
	destroy := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hub.Publish(events.Event{Type: events.Destroyed, Sandbox: "dddddddddddd"})
		w.WriteHeader(http.StatusNoContent)
	}))
	do(t, destroy, "DELETE", "/v1/sandboxes/dddddddddddd", "")
	if got := testutil.ToFloat64(m.ops.WithLabelValues("destroy", "node", "container", "ok")); got != 1 {
		t.Errorf("destroy counted under node/container: %g, want 1", got)
	}
	if l := m.labelsOf("dddddddddddd"); l != (sbLabels{}) {
		t.Errorf("labels kept after destroy: %+v", l)
	}
	hub.Publish(events.Event{Type: events.QuotaRejected, Tenant: "acme"})
	hub.Publish(events.Event{Type: events.QuotaRejected})
	if got := testutil.ToFloat64(m.quota.WithLabelValues("acme")); got != 1 {
		t.Errorf("quota rejections of acme = %g", got)
	}
	if got := testutil.ToFloat64(m.quota.WithLabelValues("default")); got != 1 {
		t.Errorf("quota rejections of the default tenant = %g", got)
	}
	if got := testutil.ToFloat64(m.evs.WithLabelValues(events.QuotaRejected)); got != 2 {
		t.Errorf("events{quota_rejected} = %g, want 2", got)
	}
}

func TestScrapeNeedsTokenOrAdmin(t *testing.T) {
	_, _, h := newTest(t)
	if w := do(t, h, "GET", "/metrics", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %d, want 401", w.Code)
	}
	if w := do(t, h, "GET", "/metrics", "wrong-token-wrong-token"); w.Code != http.StatusUnauthorized {
		t.Errorf("GET /metrics with a wrong token: %d, want 401", w.Code)
	}
	w := do(t, h, "GET", "/metrics", token)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /metrics with the token: %d %s", w.Code, w.Body)
	}
	body, _ := io.ReadAll(w.Body)
	for _, want := range []string{
		`agentbox_sandboxes{state="running",tier="container"} 1`,
		`agentbox_sandboxes{state="paused",tier="gvisor"} 1`,
		`agentbox_warm_pool_ready{pool="0",template="base",tier="container"} 3`,
		`agentbox_warm_pool_fills_total{pool="0",template="base",tier="container"} 7`,
		"agentbox_host_memory_available_bytes ",
		"agentbox_host_disk_free_bytes ",
		"agentbox_host_uid_ranges_free 4093",
		"go_goroutines ",
		"process_resident_memory_bytes ",
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
}

func TestRequestID(t *testing.T) {
	_, _, h := newTest(t)
	r := httptest.NewRequest("GET", "/v1/nothing", nil)
	r.Header.Set(RequestIDHeader, "client-chosen.1")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if got := w.Header().Get(RequestIDHeader); got != "client-chosen.1" {
		t.Errorf("a sane client id is kept: got %q", got)
	}
	r = httptest.NewRequest("GET", "/v1/nothing", nil)
	r.Header.Set(RequestIDHeader, "bad id\nwith newline")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if got := w.Header().Get(RequestIDHeader); len(got) != 16 || strings.ContainsAny(got, " \n") {
		t.Errorf("a hostile id is replaced: got %q", got)
	}
}

// Templates are user-chosen: past maxValues they count as "other".
func TestLabelValuesBounded(t *testing.T) {
	m, _, _ := newTest(t)
	for i := 0; i < maxValues+10; i++ {
		m.observeOp("create", fmt.Sprintf("tpl%d", i), "container", "ok", 0)
	}
	if got := testutil.ToFloat64(m.ops.WithLabelValues("create", "other", "container", "ok")); got != 10 {
		t.Errorf("creates counted as other = %g, want 10", got)
	}
	if n := testutil.CollectAndCount(m.ops); n != maxValues+1 {
		t.Errorf("%d operation series, want %d", n, maxValues+1)
	}
}

func TestLint(t *testing.T) {
	m, _, h := newTest(t)
	do(t, h, "POST", "/v1/sandboxes", "")
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "agentbox_") {
			t.Errorf("lint: %s: %s", p.Metric, p.Text)
		}
	}
}

// The per-request cost of the wrapper (route lookup, request id, counters,
// histogram, log line at a level that drops it), on a create.
func BenchmarkWrapCreate(b *testing.B) {
	hub := events.New()
	m := New(Options{Sandboxes: &fakeSandboxes{}, Events: hub, Logger: slog.New(slog.NewTextHandler(io.Discard, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	body, _ := json.Marshal(api.Sandbox{ID: "cccccccccccc", Template: "base", Isolation: "container"})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write(body)
	}))
	r := httptest.NewRequest("POST", "/v1/sandboxes", nil)
	b.ReportAllocs()
	for b.Loop() {
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
}

// The cost of one lifecycle event with the metrics observing it and one
// subscriber.
func BenchmarkPublish(b *testing.B) {
	hub := events.New()
	New(Options{Events: hub})
	sub := hub.Subscribe(events.Filter{AllTenants: true}, 1<<20)
	defer sub.Close()
	b.ReportAllocs()
	for b.Loop() {
		hub.Publish(events.Event{Type: events.Created, Sandbox: "cccccccccccc", Template: "base", Isolation: "container"})
		if sub.Ready() != nil {
			sub.Next()
		}
	}
}

// The separate metrics listener without a token serves anyone (the config
// allows that on loopback only); with one it wants it.
func TestScrapeHandlerOpen(t *testing.T) {
	m, _, _ := newTest(t)
	if w := do(t, m.ScrapeHandler(false), "GET", "/metrics", ""); w.Code != http.StatusOK {
		t.Errorf("open scrape handler: %d", w.Code)
	}
	if w := do(t, m.ScrapeHandler(true), "GET", "/metrics", ""); w.Code != http.StatusUnauthorized {
		t.Errorf("scrape handler with auth, no token: %d, want 401", w.Code)
	}
}

// One log line per request: its id, route, tenant, status and duration.
func TestRequestLogLine(t *testing.T) {
	var buf strings.Builder
	m := New(Options{Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	h := m.Wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		NoteTenant(r.Context(), "acme")
		w.WriteHeader(http.StatusNotFound)
	}))
	r := httptest.NewRequest("GET", "/v1/sandboxes/abcdefabcdef", nil)
	r.Header.Set(RequestIDHeader, "rid-42")
	h.ServeHTTP(httptest.NewRecorder(), r)
	line := buf.String()
	for _, want := range []string{"msg=request", "request_id=rid-42", `route="GET /v1/sandboxes/{id}"`, "tenant=acme", "status=404", "took="} {
		if !strings.Contains(line, want) {
			t.Errorf("log line %q lacks %s", line, want)
		}
	}
	if strings.Count(line, "\n") != 1 {
		t.Errorf("want one line, got %q", line)
	}
}
