package server

import (
	"net/http/httptest"
	"testing"
)

func TestIsMCPTransport(t *testing.T) {
	for _, c := range []struct {
		path string
		want bool
	}{
		{"/mcp", true},
		{"/v1/sandboxes/abc/mcp-servers/fs/mcp", true},
		{"/v1/sandboxes/abc/mcp-servers", false}, // starting a server is audited as a request
		{"/v1/sandboxes/abc/mcp-servers/fs", false},
		{"/v1/sandboxes/abc/files", false},
		{"/mcp/x", false},
	} {
		r := httptest.NewRequest("POST", c.path, nil)
		if got := isMCPTransport(r); got != c.want {
			t.Errorf("isMCPTransport(%s) = %v, want %v", c.path, got, c.want)
		}
	}
}
