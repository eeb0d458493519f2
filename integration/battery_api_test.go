package integration

// Battery items 31 and 32 (the API), tenant isolation route by route,
// quotas, the rate limit and the audit log. Verdicts come from the host:
// status codes and bodies seen by the client, the first tenant's sandbox,
// files and snapshot checked through the admin key afterwards, and the
// daemon's health latency measured while it is attacked.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage/ocitest"
)

// tenantKey creates a tenant with quotas and a key for it, and returns a
// client acting with that key and the key.

// slowHealth bounds a health call while the API is attacked: far above
// what a loaded host needs, far below the attacks' own duration.
const slowHealth = 10 * time.Second

func tenantKey(t testing.TB, prefix string, q *api.Quotas) (string, *client.Client, *api.Key) {
	t.Helper()
	ctx := context.Background()
	b := make([]byte, 4)
	rand.Read(b)
	name := prefix + "-" + hex.EncodeToString(b)
	if _, err := env.client.CreateTenant(ctx, api.CreateTenantRequest{Name: name, Quotas: q}); err != nil {
		t.Fatal(err)
	}
	k, err := env.client.CreateKey(ctx, api.CreateKeyRequest{Tenant: name, Name: "test"})
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(client.WithHost("unix://"+env.cfg.Socket), client.WithAPIKey(k.Secret), client.WithoutEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A fresh key of the tenant's own: the test may have revoked k.
		ctx := context.Background()
		k2, err := env.client.CreateKey(ctx, api.CreateKeyRequest{Tenant: name, Name: "cleanup"})
		if err != nil {
			return
		}
		own, _ := client.New(client.WithHost("unix://"+env.cfg.Socket), client.WithAPIKey(k2.Secret), client.WithoutEnvironment())
		list, _ := own.ListSandboxes(ctx, client.ListOptions{})
		for _, sb := range list {
			_ = own.DestroySandbox(ctx, sb.ID)
		}
		snaps, _ := own.ListSnapshots(ctx)
		for _, s := range snaps {
			_ = own.DeleteSnapshot(ctx, s.ID)
		}
		_ = env.client.DeleteTenant(ctx, name)
	})
	return name, c, k
}

// apiRawClient is a raw HTTP client on the daemon's socket (no SDK checks).
func apiRawClient() *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", env.cfg.Socket)
		},
	}}
}

func rawDo(t testing.TB, hc *http.Client, method, path, key string, body io.Reader) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://agentbox"+path, body)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, string(b)
}

// adminOnly are the routes only an admin key may use.
func adminOnly(r api.Route) bool {
	for _, p := range []string{"/v1/keys", "/v1/tenants", "/v1/audit"} {
		if r.Path == p || strings.HasPrefix(r.Path, p+"/") {
			return true
		}
	}
	// Importing a directory of the daemon's host needs an admin key;
	// tenants upload images and build their own templates.
	// Snapshot streams move between nodes for a fleet gateway.
	return strings.HasSuffix(r.Path, "/security") || r.Pattern() == "POST /v1/templates" ||
		r.Pattern() == "GET /v1/snapshots/{ref}/export" || r.Pattern() == "POST /v1/snapshots/import"
}

// uploadTenantTemplate uploads a small busybox image as template name
// with c's key: a template that tenant owns.
func uploadTenantTemplate(t *testing.T, c *client.Client, name string) *api.Template {
	t.Helper()
	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := ocitest.WriteDockerArchive(archive, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tpl, err := c.UploadTemplate(context.Background(), api.ImportTemplateRequest{Name: name}, f)
	if err != nil {
		t.Fatalf("tenant upload of template %s: %v", name, err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })
	return tpl
}

func TestBatteryAPI(t *testing.T) {
	tiers := batteryRunTiers(t)
	from := rowCount()
	t.Cleanup(func() { printTable("API battery", from) })
	for _, it := range []batteryItem{
		{"31_api_keys_tenants", itemAPIKeys},
		{"32_api_abuse", itemAPIAbuse},
	} {
		t.Run(it.name, func(t *testing.T) {
			for _, tier := range tiers {
				if !runsOn(it.name, tier) {
					continue
				}
				ok := t.Run(tier, func(t *testing.T) {
					start := time.Now()
					it.run(t, &battery{tier: tier})
					evidence(t, "%.1fs", time.Since(start).Seconds())
				})
				recordRow(it.name, tier, t, ok)
			}
		})
	}
}

// itemAPIKeys: no key, a wrong key, a revoked key get 401; a second
// tenant's key gets 404 (403 on admin routes) on every route of api.Routes
// aimed at the first tenant's sandbox, snapshot, process and template
// (409 to an upload or build under its name), and changes nothing.
func itemAPIKeys(t *testing.T, b *battery) {
	ctx := context.Background()
	hc := apiRawClient()
	nameA, ca, keyA := tenantKey(t, "bat-a", nil)
	_, _, keyB := tenantKey(t, "bat-b", nil)

	sb, err := ca.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: b.tier})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo A-SECRET > /tmp/flag"}); err != nil {
		t.Fatal(err)
	}
	// The other tenant's routes are aimed at a snapshot of the sandbox:
	// on the microvm tier the snapshot with memory, the only one it takes
	// (docs/microvm.md).
	snapshot := ca.CreateSnapshot
	if b.tier == "microvm" {
		snapshot = ca.CreateMemorySnapshot
	}
	snap, err := snapshot(ctx, sb.ID, "")
	if err != nil {
		t.Fatal(err)
	}
	proc, err := ca.StartProcess(ctx, sb.ID, api.StartProcessRequest{Cmd: []string{"sleep", "300"}})
	if err != nil {
		t.Fatal(err)
	}
	tplA := "bat-tpl-" + randHex(4)
	if tpl := uploadTenantTemplate(t, ca, tplA); tpl.Tenant != nameA || tpl.Version != "1" {
		t.Fatalf("tenant's uploaded template = %+v, want version 1 owned by %s", tpl, nameA)
	}

	// Without a valid key.
	random := "abx_" + strings.Repeat("Z", 40)
	for _, k := range []struct{ name, key string }{{"none", ""}, {"malformed", "hello"}, {"unknown", random}} {
		if code, body := rawDo(t, hc, "GET", "/v1/sandboxes/"+sb.ID, k.key, nil); code != 401 {
			t.Errorf("%s key: GET sandbox = %d %s, want 401", k.name, code, body)
		}
	}

	// The second tenant, route by route.
	fill := strings.NewReplacer("{id}", sb.ID, "{ref}", snap.ID, "{pid}", strconv.Itoa(proc.Pid), "{name}", nameA)
	var checked, notFound, forbidden, refused int
	for _, r := range api.Routes {
		path := r.Path
		switch {
		case strings.HasPrefix(path, api.SandboxPrefix+"/processes/{ref}"):
			path = strings.Replace(path, "{ref}", strconv.Itoa(proc.Pid), 1)
		case path == "/v1/keys/{id}":
			path = "/v1/keys/" + keyA.ID
		case strings.HasPrefix(path, "/v1/templates/{name}"):
			path = strings.Replace(path, "{name}", tplA, 1)
		case r.Pattern() == "POST /v1/templates/import", r.Pattern() == "POST /v1/templates/build":
			path += "?name=" + tplA
		}
		path = fill.Replace(path)
		var body io.Reader
		if r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH" {
			body = strings.NewReader(`{}`)
		}
		if r.Pattern() == "POST /v1/sandboxes" {
			body = strings.NewReader(`{"snapshot":"` + snap.ID + `"}`)
		}
		var (
			code int
			resp string
		)
		if r.Pattern() == "GET /v1/events" { // a stream: what it carries in 2 s (observe_test.go)
			code, resp = rawStream(t, path, keyB.Secret, 2*time.Second)
		} else {
			code, resp = rawDo(t, hc, r.Method, path, keyB.Secret, body)
		}
		checked++
		targeted := strings.Contains(r.Path, "{") || r.Pattern() == "POST /v1/sandboxes"
		switch {
		case r.Pattern() == "POST /v1/templates/import", r.Pattern() == "POST /v1/templates/build":
			// The name is taken; the body (not an image or a build
			// spec) is never read.
			refused++
			if code != 409 {
				t.Errorf("%s %s under another tenant's template name = %d %s, want 409", r.Method, path, code, resp)
			}
		case adminOnly(r):
			forbidden++
			if code != 403 {
				t.Errorf("%s %s with another tenant's key = %d %s, want 403", r.Method, path, code, resp)
			}
		case targeted:
			notFound++
			if code != 404 {
				t.Errorf("%s %s with another tenant's key = %d %s, want 404", r.Method, path, code, resp)
			}
		default:
			// 501: a gateway's route asked of a node (GET
			// /v1/fleet/nodes), which says so.
			if code >= 500 && !(code == 501 && strings.Contains(resp, `"unimplemented"`)) {
				t.Errorf("%s %s = %d %s", r.Method, path, code, resp)
			}
		}
		// A 404 may echo the id the caller sent; nothing else may carry
		// the first tenant's ids or data.
		echoed := code == 404 || code == 403 || code == 409
		if strings.Contains(resp, "A-SECRET") || (!echoed && (strings.Contains(resp, sb.ID) || strings.Contains(resp, snap.ID) || strings.Contains(resp, tplA))) {
			t.Errorf("%s %s answered another tenant with the first tenant's data: %s", r.Method, path, resp)
		}
	}

	// The template, beyond the route list: creating from it, and the
	// public templates, which a tenant uses but cannot remove.
	if code, resp := rawDo(t, hc, "POST", "/v1/sandboxes", keyB.Secret, strings.NewReader(`{"template":"`+tplA+`"}`)); code != 404 {
		t.Errorf("create from another tenant's template = %d %s, want 404", code, resp)
	}
	if code, resp := rawDo(t, hc, "DELETE", "/v1/templates/busybox", keyB.Secret, nil); code != 403 {
		t.Errorf("a tenant removing a public template = %d %s, want 403", code, resp)
	}
	if code, resp := rawDo(t, hc, "GET", "/v1/templates", keyB.Secret, nil); code != 200 || !strings.Contains(resp, `"busybox"`) || strings.Contains(resp, tplA) {
		t.Errorf("another tenant's template list = %d %s, want busybox and not %s", code, resp, tplA)
	}

	// Nothing changed: checked with the first tenant's own key.
	got, err := ca.GetSandbox(ctx, sb.ID)
	if err != nil || got.State != api.StateRunning {
		t.Errorf("first tenant's sandbox after the attempts = %+v, %v", got, err)
	}
	if out := mustSh(t, sb.ID, "cat /tmp/flag"); strings.TrimSpace(out) != "A-SECRET" {
		t.Errorf("flag file = %q", out)
	}
	if _, err := ca.GetSnapshot(ctx, snap.ID); err != nil {
		t.Errorf("snapshot gone: %v", err)
	}
	if ps, err := ca.ListProcesses(ctx, sb.ID); err != nil || !hasRunning(ps, proc.Pid) {
		t.Errorf("background process %d no longer running: %v %v", proc.Pid, ps, err)
	}
	if tpl, err := ca.GetTemplate(ctx, tplA); err != nil || tpl.Version != "1" || tpl.Tenant != nameA {
		t.Errorf("first tenant's template after the attempts = %+v, %v", tpl, err)
	}
	sbT, err := ca.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tplA, Isolation: b.tier})
	if err != nil {
		t.Errorf("the owner creating from its template: %v", err)
	} else {
		if out, err := ca.Exec(ctx, sbT.ID, api.ExecRequest{Shell: "cat /opq/new"}); err != nil || out.Stdout != "new" {
			t.Errorf("sandbox from the tenant's template: %+v, %v", out, err)
		}
		if err := ca.DestroySandbox(ctx, sbT.ID); err != nil { // the template's cleanup needs it gone
			t.Error(err)
		}
	}
	if err := env.client.DeleteTenant(ctx, nameA); !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), tplA) {
		t.Errorf("deleting a tenant that owns a template = %v, want failed_precondition naming %s", err, tplA)
	}

	// The audit log has the second tenant's attempts, with their statuses.
	entries, err := env.client.Audit(ctx, 500)
	if err != nil {
		t.Fatal(err)
	}
	var seen bool
	for _, e := range entries {
		if e.KeyID == keyB.ID && e.Method == "DELETE" && e.SandboxID == sb.ID && e.Status == 404 {
			seen = true
		}
	}
	if !seen {
		t.Errorf("audit log lacks the second tenant's DELETE of %s answered 404", sb.ID)
	}

	// Revocation takes effect on the next request.
	if err := env.client.RevokeKey(ctx, keyA.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := ca.GetSandbox(ctx, sb.ID); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("revoked key: GetSandbox = %v, want unauthenticated", err)
	}
	_ = ca
	evidence(t, "no/malformed/unknown/revoked key: 401; other tenant on %d routes of api.Routes: %d answered 404, %d admin-only 403, %d 409 (upload or build under the tenant's template name), the rest leaked nothing; create from its template 404; sandbox, flag file, snapshot, process and template intact; audit log holds the attempts",
		checked, notFound, forbidden, refused)
}

func hasRunning(ps []api.Process, pid int) bool {
	for _, p := range ps {
		if p.Pid == pid && p.State == api.ProcessRunning {
			return true
		}
	}
	return false
}

// healthLatency measures GET /v1/health through the SDK.
func healthLatency(t testing.TB) time.Duration {
	start := time.Now()
	if _, err := env.client.Health(context.Background()); err != nil {
		t.Errorf("daemon unhealthy: %v", err)
	}
	return time.Since(start)
}

// itemAPIAbuse: malformed JSON, wrong types, 10 MB bodies, 1 MB headers
// and a slowloris client get a clear 4xx or a closed connection, while the
// daemon stays healthy and fast.
func itemAPIAbuse(t *testing.T, b *battery) {
	hc := apiRawClient()
	_, _, key := tenantKey(t, "bat-abuse", nil)
	cases := []struct {
		name string
		body string
		want int
	}{
		{"malformed JSON", `{"template":`, 400},
		{"not an object", `[1,2,3]`, 400},
		{"wrong type", `{"memory_mb":"lots"}`, 400},
		{"unknown field", `{"templat":"busybox"}`, 400},
		{"two objects", `{}{}`, 400},
	}
	for _, c := range cases {
		if code, body := rawDo(t, hc, "POST", "/v1/sandboxes", key.Secret, strings.NewReader(c.body)); code != c.want || !strings.Contains(body, "invalid_argument") {
			t.Errorf("%s: %d %s, want %d invalid_argument", c.name, code, body, c.want)
		}
	}
	// 10 MB body: refused at the JSON limit without reading it all.
	start := time.Now()
	big := bytes.Repeat([]byte("a"), 10<<20)
	code, body := rawDo(t, hc, "POST", "/v1/sandboxes", key.Secret, io.MultiReader(strings.NewReader(`{"template":"`), bytes.NewReader(big), strings.NewReader(`"}`)))
	if code != 413 || !strings.Contains(body, "invalid_argument") {
		t.Errorf("10 MB body: %d %s, want 413 invalid_argument (the answer delivered, not a closed connection)", code, body)
	}
	bigTook := time.Since(start)

	// 1 MB of headers: 431 or a closed connection.
	req, _ := http.NewRequest("GET", "http://agentbox/v1/health", nil)
	req.Header.Set("Authorization", "Bearer "+key.Secret)
	req.Header.Set("X-Junk", strings.Repeat("j", 1<<20))
	hdrCode := 0
	if resp, err := hc.Do(req); err == nil {
		hdrCode = resp.StatusCode
		resp.Body.Close()
	}
	if hdrCode != 0 && hdrCode != 431 {
		t.Errorf("1 MB header: %d, want 431 or a closed connection", hdrCode)
	}

	// Slowloris: headers one byte at a time; meanwhile health stays fast.
	conn, err := net.Dial("unix", env.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var closed atomic.Bool
	var closedAfter time.Duration
	var wg sync.WaitGroup
	wg.Add(1)
	slowStart := time.Now()
	go func() {
		defer wg.Done()
		msg := "GET /v1/health HTTP/1.1\r\nHost: agentbox\r\nAuthorization: Bearer " + key.Secret + "\r\nX-Slow: " + strings.Repeat("s", 1000)
		for i := 0; i < len(msg); i++ {
			if _, err := conn.Write([]byte{msg[i]}); err != nil {
				closed.Store(true)
				closedAfter = time.Since(slowStart)
				return
			}
			time.Sleep(100 * time.Millisecond)
			if time.Since(slowStart) > 40*time.Second {
				return
			}
		}
	}()
	// Reading sees the server's close (possibly after a 408).
	readDone := make(chan time.Duration, 1)
	go func() {
		br := bufio.NewReader(conn)
		_, _ = io.Copy(io.Discard, br)
		readDone <- time.Since(slowStart)
	}()
	var worst time.Duration
	deadline := time.After(40 * time.Second)
	var readAfter time.Duration
loop:
	for {
		select {
		case readAfter = <-readDone:
			break loop
		case <-deadline:
			break loop
		case <-time.After(500 * time.Millisecond):
			if d := healthLatency(t); d > worst {
				worst = d
			}
		}
	}
	conn.Close()
	wg.Wait()
	if readAfter == 0 {
		t.Errorf("slowloris connection still open after 40 s")
	}
	// A daemon the attack blocked would answer only once the slowloris
	// is closed (tens of seconds); a loaded host answers in well under
	// slowHealth.
	if worst > slowHealth {
		t.Errorf("health took %v during the attack, want < %v", worst, slowHealth)
	}
	_ = closed.Load()
	_ = closedAfter
	if d := healthLatency(t); d > slowHealth {
		t.Errorf("health after the attacks took %v", d)
	}
	evidence(t, "malformed/wrong-type/unknown-field/trailing JSON: 400 invalid_argument; 10 MB body: %d in %v; 1 MB header: %d (0 = closed); slowloris closed by the daemon after %v; health worst %v during it",
		code, bigTook.Round(time.Millisecond), hdrCode, readAfter.Round(100*time.Millisecond), worst.Round(time.Millisecond))
	_ = fmt.Sprint()
}
