package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

// loopbackToDaemon serves 127.0.0.1:<port> by splicing each connection
// to the test daemon's unix socket, so that a Prometheus (which scrapes
// TCP) reaches the daemon's own API listener. It returns the address.
func loopbackToDaemon(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				d, err := net.Dial("unix", env.cfg.Socket)
				if err != nil {
					return
				}
				defer d.Close()
				go func() { _, _ = io.Copy(d, c); d.(*net.UnixConn).CloseWrite() }()
				_, _ = io.Copy(c, d)
			}()
		}
	}()
	return ln.Addr().String()
}

// prometheus is a real Prometheus server (Debian's package, installed by
// scripts/install-test-deps.sh) on loopback, scraping target every second
// with the admin key.
type prometheus struct {
	base string
}

func startPrometheus(t *testing.T, target string) *prometheus {
	t.Helper()
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatal("prometheus is not installed: run scripts/install-test-deps.sh (make test does)")
	}
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "key")
	if err := os.WriteFile(keyFile, []byte(env.key), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: agentbox
    authorization:
      credentials_file: %s
    static_configs:
      - targets: ['%s']
`, keyFile, target)
	cfgFile := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	// A port of its own: taken from the kernel, then given to Prometheus;
	// another process could take it in between, so a failed start tries
	// again with a new one.
	for attempt := 0; attempt < 5; attempt++ {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := ln.Addr().String()
		ln.Close()
		var out bytes.Buffer
		cmd := exec.Command(bin, "--config.file="+cfgFile, "--storage.tsdb.path="+filepath.Join(dir, fmt.Sprint("data", attempt)),
			"--web.listen-address="+addr, "--log.level=warn")
		cmd.Stdout, cmd.Stderr = &out, &out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- cmd.Wait() }()
		p := &prometheus{base: "http://" + addr}
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			select {
			case err := <-exited:
				t.Logf("prometheus exited (%v): %s", err, out.String())
				deadline = time.Time{}
				continue
			default:
			}
			if resp, err := http.Get(p.base + "/-/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					t.Cleanup(func() { _ = cmd.Process.Kill(); <-exited })
					return p
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if !deadline.IsZero() {
			_ = cmd.Process.Kill()
			<-exited
			t.Fatalf("prometheus did not become ready in 60 s: %s", out.String())
		}
	}
	t.Fatal("prometheus could not start on a free loopback port in 5 tries")
	return nil
}

// query runs an instant PromQL query and returns the sum of the values
// of its result vector and how many series it had.
func (p *prometheus) query(t *testing.T, q string) (float64, int) {
	t.Helper()
	resp, err := http.Get(p.base + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r struct {
		Status string
		Error  string
		Data   struct {
			Result []struct {
				Value [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || r.Status != "success" {
		t.Fatalf("query %s: %v %s %s", q, err, r.Status, r.Error)
	}
	sum := 0.0
	for _, s := range r.Data.Result {
		v, _ := strconv.ParseFloat(fmt.Sprint(s.Value[1]), 64)
		sum += v
	}
	return sum, len(r.Data.Result)
}

// waitQuery waits (60 s at most) until the query's sum passes ok.
func (p *prometheus) waitQuery(t *testing.T, q string, what string, ok func(float64) bool) float64 {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		v, _ := p.query(t, q)
		if ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("prometheus: %s = %g after 60 s; want %s", q, v, what)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// TestPrometheusScrapes: a real Prometheus scrapes the daemon's /metrics
// (admin key) while the test creates, execs in and destroys sandboxes and
// trips a tenant's quota; Prometheus's HTTP API then holds those counts.
func TestPrometheusScrapes(t *testing.T) {
	ctx := context.Background()
	prom := startPrometheus(t, loopbackToDaemon(t))
	prom.waitQuery(t, `up{job="agentbox"}`, "1 (scraped)", func(v float64) bool { return v == 1 })

	ops := func(op string) string {
		return fmt.Sprintf(`sum(agentbox_sandbox_operations_total{operation=%q,template="busybox",tier="container",outcome="ok"})`, op)
	}
	before := map[string]float64{}
	for _, op := range []string{"create", "exec", "destroy"} {
		before[op], _ = prom.query(t, ops(op))
	}
	const n = 3
	var ids []string
	for i := 0; i < n; i++ {
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: "container"})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
		mustSh(t, sb.ID, "echo hi")
	}
	prom.waitQuery(t, `sum(agentbox_sandboxes{state="running",tier="container"})`, fmt.Sprintf(">= %d", n),
		func(v float64) bool { return v >= n })
	for _, id := range ids {
		if err := env.client.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for _, op := range []string{"create", "exec", "destroy"} {
		want := before[op] + n
		prom.waitQuery(t, ops(op), fmt.Sprintf(">= %g (%g before, %d caused)", want, before[op], n),
			func(v float64) bool { return v >= want })
	}
	// The latency histogram has the creates too.
	prom.waitQuery(t, `sum(agentbox_sandbox_operation_duration_seconds_count{operation="create",tier="container",outcome="ok"})`,
		fmt.Sprintf(">= %g", before["create"]+n), func(v float64) bool { return v >= before["create"]+n })

	// A tenant's quota refusal is counted under the tenant.
	name, c, _ := tenantKey(t, "prom", &api.Quotas{Sandboxes: 1})
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.DestroySandbox(context.Background(), sb.ID) })
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("create over the quota = %v, want resource_exhausted", err)
	}
	prom.waitQuery(t, fmt.Sprintf(`agentbox_quota_rejections_total{tenant=%q}`, name), "1", func(v float64) bool { return v == 1 })
	// Go runtime and process metrics come along.
	prom.waitQuery(t, `go_goroutines{job="agentbox"}`, "> 0", func(v float64) bool { return v > 0 })
	prom.waitQuery(t, `process_resident_memory_bytes{job="agentbox"}`, "> 0", func(v float64) bool { return v > 0 })
	// No sandbox id is a label value.
	// Every query of contrib/grafana-dashboard.json parses and runs.
	for _, q := range dashboardQueries(t) {
		prom.query(t, q)
	}
	expo := scrape(t, env.key)
	for _, id := range append(ids, sb.ID) {
		if strings.Contains(expo, id) {
			t.Errorf("the exposition names sandbox %s", id)
		}
	}
}

// dashboardQueries returns contrib/grafana-dashboard.json's PromQL with
// its variables filled in.
func dashboardQueries(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(env.repo, "contrib", "grafana-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Targets []struct{ Expr string }
		}
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("contrib/grafana-dashboard.json: %v", err)
	}
	r := strings.NewReplacer("$job", ".*", "$__rate_interval", "1m")
	var qs []string
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			qs = append(qs, r.Replace(tg.Expr))
		}
	}
	if len(qs) < 10 {
		t.Fatalf("contrib/grafana-dashboard.json has only %d queries", len(qs))
	}
	return qs
}

// rawStream GETs a streamed route with key and returns its status and
// what it sent within d.
func rawStream(t testing.TB, path, key string, d time.Duration) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://agentbox"+path, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := unixHTTP().Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20)) // until d ends it
	return resp.StatusCode, string(b)
}

// scrape reads GET /metrics with key.
func scrape(t *testing.T, key string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://agentbox/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := unixHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %d %s", resp.StatusCode, b)
	}
	return string(b)
}

// TestMetricsExposition: promtool accepts the exposition; a tenant's key
// may not read it; every answer carries a request id, and error bodies
// carry the same.
func TestMetricsExposition(t *testing.T) {
	newSandbox(t, api.CreateSandboxRequest{Template: "busybox"}) // some sandbox series
	expo := scrape(t, env.key)
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool is not installed: run scripts/install-test-deps.sh (make test does)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(expo)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for _, fam := range []string{"agentbox_sandbox_operations_total", "agentbox_sandboxes", "agentbox_events_total",
		"agentbox_host_memory_available_bytes", "agentbox_host_disk_free_bytes", "agentbox_host_subnets_free", "agentbox_host_uid_ranges_free",
		"agentbox_egress_decisions_total", "go_goroutines", "process_cpu_seconds_total"} {
		if !strings.Contains(expo, "\n"+fam) {
			t.Errorf("the exposition has no %s", fam)
		}
	}

	_, _, k := tenantKey(t, "scrape", nil)
	req, _ := http.NewRequest("GET", "http://agentbox/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+k.Secret)
	req.Header.Set("X-Request-Id", "it-req-1")
	resp, err := unixHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	if resp.StatusCode != http.StatusForbidden || eb.Error.Code != "permission_denied" {
		t.Errorf("GET /metrics with a tenant's key = %d %+v, want 403 permission_denied", resp.StatusCode, eb)
	}
	if got := resp.Header.Get("X-Request-Id"); got != "it-req-1" || eb.Error.RequestID != "it-req-1" {
		t.Errorf("request id: header %q, body %q; want it-req-1 in both", got, eb.Error.RequestID)
	}
	// An API error names the request id the daemon made.
	req, _ = http.NewRequest("GET", "http://agentbox/v1/sandboxes/nosuchsandbox", nil)
	req.Header.Set("Authorization", "Bearer "+env.key)
	resp2, err := unixHTTP().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	eb = api.ErrorBody{}
	_ = json.NewDecoder(resp2.Body).Decode(&eb)
	if id := resp2.Header.Get("X-Request-Id"); resp2.StatusCode != 404 || id == "" || eb.Error.RequestID != id {
		t.Errorf("404: status %d, header id %q, body id %q; want the same id in both", resp2.StatusCode, id, eb.Error.RequestID)
	}
}

// collect reads events from st until it has seen want's last type for
// sandbox id, and returns the types seen for id, in order.
func collectEvents(t *testing.T, st *client.EventStream, id string, last string) []string {
	t.Helper()
	var got []string
	for {
		e, err := st.Next()
		if err != nil {
			t.Fatalf("events after %v: %v", got, err)
		}
		if e.Sandbox != id {
			continue
		}
		got = append(got, e.Type)
		if e.Type == last {
			return got
		}
	}
}

// TestEventsStream: two subscribers each get a sandbox's lifecycle in
// order; a tenant's stream carries nothing of another tenant.
func TestEventsStream(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var subs []*client.EventStream
	for i := 0; i < 2; i++ {
		st, err := env.client.Events(ctx, client.EventFilter{})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		subs = append(subs, st)
	}
	sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), sb.ID) })
	if _, err := env.client.PauseSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.ResumeSandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.CreateSnapshot(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.ResetSandbox(ctx, sb.ID, ""); err != nil {
		t.Fatal(err)
	}
	if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	want := []string{"created", "paused", "resumed", "snapshotted", "reset", "destroyed"}
	for i, st := range subs {
		if got := collectEvents(t, st, sb.ID, "destroyed"); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("subscriber %d got %v, want %v", i, got, want)
		}
	}

	// Tenant isolation: A's lifecycle first, then B's; B's stream has B's
	// and, since every stream is in order, would have shown A's before.
	_, ca, _ := tenantKey(t, "eva", nil)
	nameB, cb, _ := tenantKey(t, "evb", nil)
	stB, err := cb.Events(ctx, client.EventFilter{})
	if err != nil {
		t.Fatal(err)
	}
	defer stB.Close()
	if _, err := cb.Events(ctx, client.EventFilter{Tenant: "someone-else"}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("a tenant asking for another tenant's events = %v, want permission_denied", err)
	}
	sa, err := ca.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.DestroySandbox(ctx, sa.ID); err != nil {
		t.Fatal(err)
	}
	sbB, err := cb.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cb.DestroySandbox(ctx, sbB.ID); err != nil {
		t.Fatal(err)
	}
	var seen []string
	for {
		e, err := stB.Next()
		if err != nil {
			t.Fatalf("tenant B's events after %v: %v", seen, err)
		}
		seen = append(seen, e.Type+":"+e.Sandbox)
		if e.Tenant != nameB {
			t.Errorf("tenant %s's stream carried %+v", nameB, e)
		}
		if e.Sandbox == sbB.ID && e.Type == "destroyed" {
			break
		}
	}
	if seen[0] != "created:"+sbB.ID {
		t.Errorf("tenant B's stream = %v, want its own sandbox's created first", seen)
	}
}

// TestStatsAtCPULimit: a sandbox limited to a tenth of a core runs four
// CPU burners; its usage samples (API and `agentbox stats`) show it at its
// limit: busy, and never above the limit beyond sampling noise. The limit
// is small so that the burners saturate it even on a loaded host (at a
// load average of 20 on 2 cores each runnable process gets about a tenth
// of a core).
func TestStatsAtCPULimit(t *testing.T) {
	const limit = 0.1
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", CPU: limit})
	mustSh(t, id, "for i in 1 2 3 4; do (while :; do :; done) >/dev/null 2>&1 & done; echo started")
	start := time.Now()
	deadline := start.Add(90 * time.Second)
	var (
		busy bool
		last api.UsageSample
	)
	for time.Now().Before(deadline) && !busy {
		out, errOut, code := cli(t, "", "stats", "--no-stream", "--json", id)
		if code != 0 {
			t.Fatalf("agentbox stats: exit %d: %s", code, errOut)
		}
		var rows []struct {
			Sandbox string
			Limits  api.Resources
			Sample  api.UsageSample
		}
		if err := json.Unmarshal([]byte(out), &rows); err != nil || len(rows) != 1 || rows[0].Sandbox != id {
			t.Fatalf("agentbox stats --json = %q (%v)", out, err)
		}
		if rows[0].Limits.CPU != limit {
			t.Errorf("stats limit = %g cores, want %g", rows[0].Limits.CPU, limit)
		}
		last = rows[0].Sample
		// Busy: most of its limit.
		busy = last.CPUPercent >= 0.6*limit*100 && last.Time.After(start)
		if !busy {
			time.Sleep(time.Second)
		}
	}
	if !busy {
		t.Fatalf("agentbox stats never showed the burners' sandbox at its limit (>= %.0f%% of a core) in 90 s; last sample %+v", 0.6*limit*100, last)
	}
	m, err := env.client.SandboxMetrics(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range m.Samples {
		// Four burners want 400%; the limit holds them at 10%. A
		// sample's window and the CFS period do not line up exactly.
		if s.CPUPercent > limit*100*1.25+1 {
			t.Errorf("sample at %v: %.1f%% of a core, above the %g-core limit", s.Time, s.CPUPercent, limit)
		}
		if s.Time.After(start) && (s.Pids < 5 || s.MemoryBytes <= 0) {
			t.Errorf("sample at %v: pids %d, memory %d; want the burners and the agent counted", s.Time, s.Pids, s.MemoryBytes)
		}
	}
	// The table form names the sandbox and its limit.
	out, _, code := cli(t, "", "stats", "--no-stream", id)
	if code != 0 || !strings.Contains(out, id) || !strings.Contains(out, "10%") {
		t.Errorf("agentbox stats --no-stream = %d %q; want a row for %s with its 10%% limit", code, out, id)
	}
}
