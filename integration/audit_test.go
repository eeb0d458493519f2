package integration

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestAuditCoversRoutes: every state-changing route of api.Routes (every
// method but GET, and the terminal's WebSocket) is in the audit log with
// who called it and what it answered, also when it was refused. The calls
// aim at ids that do not exist, so nothing changes.
func TestAuditCoversRoutes(t *testing.T) {
	ctx := context.Background()
	_, _, key := tenantKey(t, "audit", nil)
	hc := apiRawClient()
	fill := strings.NewReplacer("{id}", "nosuchsandbox", "{ref}", "nosuchref", "{pid}", "999999", "{name}", "nosuchname")
	want := map[string]int{} // "METHOD path" -> status answered
	for _, r := range api.Routes {
		ws := strings.HasSuffix(r.Path, "/ws")
		if r.Method == "GET" && !ws {
			continue
		}
		path := fill.Replace(r.Path)
		body := `{}`
		if r.Pattern() == "POST /v1/sandboxes" {
			body = `{"template":"no-such-template"}` // must not create one
		}
		req, err := http.NewRequest(r.Method, "http://agentbox"+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+key.Secret)
		req.Header.Set("Content-Type", "application/json")
		if ws {
			req.Body, req.ContentLength = http.NoBody, 0
			req.Header.Set("Connection", "Upgrade")
			req.Header.Set("Upgrade", "websocket")
			req.Header.Set("Sec-WebSocket-Version", "13")
			req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", r.Method, path, err)
		}
		resp.Body.Close()
		if resp.StatusCode < 400 {
			t.Errorf("%s %s with ids that do not exist answered %d", r.Method, path, resp.StatusCode)
		}
		want[r.Method+" "+path] = resp.StatusCode
	}
	entries, err := env.client.Audit(ctx, 2000)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]api.AuditEntry{}
	for _, e := range entries {
		if e.KeyID == key.ID {
			got[e.Method+" "+e.Path] = e
		}
	}
	for call, status := range want {
		e, ok := got[call]
		switch {
		case !ok:
			t.Errorf("audit log lacks %s", call)
		case e.Status != status || e.Tenant != key.Tenant || e.Time.IsZero():
			t.Errorf("audit entry of %s = %+v, want status %d, tenant %s", call, e, status, key.Tenant)
		}
	}
	if len(got) != len(want) {
		t.Errorf("audit log has %d entries of the key, want %d", len(got), len(want))
	}
	t.Logf("%d state-changing routes called, each in the audit log with its status", len(want))
}
