package server

import (
	"net/http/httptest"
	"testing"
)

func TestE2BHost(t *testing.T) {
	cases := []struct {
		host, path string
		ok         bool
		wantPath   string
		id, port   string
	}{
		{"api.example.com", "/v2/sandboxes", true, "/e2b/v2/sandboxes", "", ""},
		{"API.example.com:8443", "/sandboxes/x", true, "/e2b/sandboxes/x", "", ""},
		{"api.example.com", "/v1/sandboxes", false, "", "", ""},
		{"api.example.com", "/e2b/v2/sandboxes", false, "", "", ""},
		{"49983-abc.example.com", "/files", true, "/e2b/files", "abc", "49983"},
		{"49999-abc.example.com:8443", "/execute", true, "/e2b/execute", "abc", "49999"},
		{"8080-abc.example.com", "/", false, "", "", ""},
		{"49983-abc.other.com", "/files", false, "", "", ""},
		{"example.com", "/v2/sandboxes", false, "", "", ""},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", c.path, nil)
		r.Host = c.host
		r.Header.Set("E2b-Sandbox-Id", "spoofed")
		got, ok := E2BHost(r, "example.com")
		if ok != c.ok {
			t.Errorf("%s%s: ok = %v, want %v", c.host, c.path, ok, c.ok)
			continue
		}
		if !ok {
			continue
		}
		if got.URL.Path != c.wantPath {
			t.Errorf("%s%s: path %q, want %q", c.host, c.path, got.URL.Path, c.wantPath)
		}
		if c.id != "" && (got.Header.Get("E2b-Sandbox-Id") != c.id || got.Header.Get("E2b-Sandbox-Port") != c.port) {
			t.Errorf("%s%s: sandbox %q port %q", c.host, c.path, got.Header.Get("E2b-Sandbox-Id"), got.Header.Get("E2b-Sandbox-Port"))
		}
		if r.URL.Path != c.path {
			t.Errorf("%s%s: the original request was changed", c.host, c.path)
		}
	}
}
