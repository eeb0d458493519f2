package proto

import (
	"sort"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestPublicRoutesAreForwarded holds the public guest routes to the
// daemon's API: each is forwarded under api.SandboxPrefix (api.Routes),
// and each route the API forwards to the guest is a public guest route.
// The API's own routes under the prefix (not the guest's) are listed,
// and the hosted MCP servers' (internal/mcphost) are the daemon's too.
func TestPublicRoutesAreForwarded(t *testing.T) {
	daemonOwn := map[string]bool{
		"GET " + api.SandboxPrefix: true, "PATCH " + api.SandboxPrefix: true, "DELETE " + api.SandboxPrefix: true,
		"POST " + api.SandboxPrefix + "/pause": true, "POST " + api.SandboxPrefix + "/resume": true,
		"POST " + api.SandboxPrefix + "/snapshots": true, "POST " + api.SandboxPrefix + "/fork": true,
		"POST " + api.SandboxPrefix + "/reset": true, "POST " + api.SandboxPrefix + "/egress": true,
		"GET " + api.SandboxPrefix + "/egress/log": true, "GET " + api.SandboxPrefix + "/security": true,
		"GET " + api.SandboxPrefix + "/metrics": true, "GET " + api.SandboxPrefix + "/desktop/stream": true,
	}
	var forwarded, public []string
	for _, r := range api.Routes {
		if strings.HasPrefix(r.Path, api.SandboxPrefix) && !daemonOwn[r.Pattern()] && !strings.HasPrefix(r.Path, api.SandboxPrefix+"/mcp-servers") {
			forwarded = append(forwarded, r.Method+" "+strings.TrimPrefix(r.Path, api.SandboxPrefix))
		}
	}
	for _, r := range Routes {
		if r.Public {
			public = append(public, r.Pattern())
		}
	}
	sort.Strings(forwarded)
	sort.Strings(public)
	if strings.Join(forwarded, "\n") != strings.Join(public, "\n") {
		t.Errorf("the API forwards:\n%s\n\nthe guest's public routes are:\n%s", strings.Join(forwarded, "\n"), strings.Join(public, "\n"))
	}
}

func TestRouteURL(t *testing.T) {
	tests := []struct {
		r    Route
		args []string
		want string
	}{
		{Ping, nil, "http://guest/ping"},
		{ProcessOutput, []string{"12"}, "http://guest/processes/12/output"},
		{Dial, []string{"8080"}, "http://guest/ports/8080/dial"},
		{ProcessGet, nil, "http://guest/processes/{ref}"},
	}
	for _, tt := range tests {
		if got := tt.r.URL(tt.args...); got != tt.want {
			t.Errorf("%s.URL(%q) = %q, want %q", tt.r.Pattern(), tt.args, got, tt.want)
		}
	}
}

func TestSupported(t *testing.T) {
	tests := []struct {
		info Info
		ok   bool
	}{
		{Info{Version: "old"}, true}, // before versioning: 0
		{Info{Version: "now", Protocol: Version}, true},
		{Info{Version: "next", Protocol: Version + 1}, false},
		{Info{Protocol: -1}, false},
	}
	for _, tt := range tests {
		err := Supported(tt.info)
		if (err == nil) != tt.ok {
			t.Errorf("Supported(%+v) = %v, want ok=%v", tt.info, err, tt.ok)
		}
	}
}
