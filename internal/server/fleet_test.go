package server

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/auth"
)

const testGatewayKey = "fleet-secret-0123456789-0123456789-abcdef"

func serve(s http.Handler, method, path, bearer string, hdr map[string]string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, path, nil)
	if bearer != "" {
		r.Header.Set("Authorization", "Bearer "+bearer)
	}
	for k, v := range hdr {
		r.Header.Set(k, v)
	}
	w := httptest.NewRecorder()
	s.ServeHTTP(w, r)
	return w
}

// A key that is not the gateway's cannot become another tenant, or the
// admin, with the gateway's headers: they are ignored, on a node with a
// gateway key and on one without.
func TestGatewayHeadersIgnoredWithoutGatewayKey(t *testing.T) {
	for _, withGateway := range []bool{false, true} {
		s, _, secret := newKeyedServer(t) // secret: tenant "default", not admin
		if withGateway {
			s.auth.SetGatewayKey(testGatewayKey)
		}
		spoof := map[string]string{auth.TenantHeader: "default", auth.AdminHeader: "true"}
		if w := serve(s, "GET", "/v1/tenants", secret, spoof); w.Code != http.StatusForbidden {
			t.Errorf("gateway %v: a tenant key with %s: true got %d %s on an admin route, want 403", withGateway, auth.AdminHeader, w.Code, w.Body)
		}
		if w := serve(s, "GET", "/v1/node", secret, spoof); w.Code != http.StatusForbidden {
			t.Errorf("gateway %v: GET /v1/node with a tenant key: %d, want 403", withGateway, w.Code)
		}
		// The gateway's secret on a node that has none configured is no key.
		if !withGateway {
			if w := serve(s, "GET", "/v1/sandboxes", testGatewayKey, spoof); w.Code != http.StatusUnauthorized {
				t.Errorf("the fleet secret on a node without gateway_key_file: %d, want 401", w.Code)
			}
		}
	}
}

// The gateway's secret acts for the principal its headers name.
func TestGatewayPrincipal(t *testing.T) {
	s, _, _ := newKeyedServer(t)
	s.info.NodeID = "n2a"
	s.auth.SetGatewayKey(testGatewayKey)
	// No tenant header: the admin.
	w := serve(s, "GET", "/v1/node", testGatewayKey, nil)
	if w.Code != http.StatusOK {
		t.Fatalf("GET /v1/node as the gateway: %d %s", w.Code, w.Body)
	}
	var ns api.NodeStatus
	if err := json.Unmarshal(w.Body.Bytes(), &ns); err != nil {
		t.Fatal(err)
	}
	if ns.NodeID != "n2a" || ns.CPUs < 1 || ns.MemoryTotalMB <= 0 || ns.MemoryAvailableMB <= 0 || ns.Templates == nil {
		t.Errorf("node status = %+v", ns)
	}
	// A tenant: not the admin, even one the node has never seen (it has
	// no quotas here; docs/cluster.md).
	tenant := map[string]string{auth.TenantHeader: "newco", auth.AdminHeader: "false"}
	if w := serve(s, "GET", "/v1/tenants", testGatewayKey, tenant); w.Code != http.StatusForbidden {
		t.Errorf("gateway as tenant newco on an admin route: %d, want 403", w.Code)
	}
	if w := serve(s, "GET", "/v1/sandboxes", testGatewayKey, tenant); w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"sandboxes":[]`) {
		t.Errorf("gateway as tenant newco listing: %d %s", w.Code, w.Body)
	}
	// A tenant's admin key.
	admin := map[string]string{auth.TenantHeader: "newco", auth.AdminHeader: "true"}
	if w := serve(s, "GET", "/v1/tenants", testGatewayKey, admin); w.Code != http.StatusOK {
		t.Errorf("gateway as an admin key: %d %s", w.Code, w.Body)
	}
	// Malformed headers are refused, not read as the admin.
	for _, bad := range []map[string]string{
		{auth.TenantHeader: "", auth.AdminHeader: "false"},
		{auth.TenantHeader: "Bad Name"},
		{auth.TenantHeader: "acme", auth.AdminHeader: "yes"},
	} {
		if w := serve(s, "GET", "/v1/sandboxes", testGatewayKey, bad); w.Code != http.StatusUnauthorized {
			t.Errorf("gateway with headers %v: %d, want 401", bad, w.Code)
		}
	}
	// A near miss of the secret is no key.
	if w := serve(s, "GET", "/v1/node", testGatewayKey[:len(testGatewayKey)-1]+"X", nil); w.Code != http.StatusUnauthorized {
		t.Errorf("a wrong fleet secret: %d, want 401", w.Code)
	}
}

func TestNodeAnswersFleetNodes501(t *testing.T) {
	s, _, _ := newKeyedServer(t)
	s.auth.SetGatewayKey(testGatewayKey)
	w := serve(s, "GET", "/v1/fleet/nodes", testGatewayKey, nil)
	if w.Code != http.StatusNotImplemented || !strings.Contains(w.Body.String(), `"unimplemented"`) {
		t.Errorf("GET /v1/fleet/nodes on a node: %d %s", w.Code, w.Body)
	}
}

func TestParseMeminfo(t *testing.T) {
	total, avail := parseMeminfo([]byte("MemTotal:       24576000 kB\nMemFree:  100 kB\nMemAvailable:   12288000 kB\n"))
	if total != 24000 || avail != 12000 {
		t.Errorf("parseMeminfo = %d, %d; want 24000, 12000", total, avail)
	}
}
