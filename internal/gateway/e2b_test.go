package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentbox/agentbox/internal/server"
)

// E2B's control plane through the gateway: the key in X-API-KEY, a create
// placed on a node as the key's tenant (the node sees the fleet key and
// acme), the list merged from every node, a sandbox's info from its node,
// and E2B's api.<domain> host form; a wrong key is E2B's 401.
func TestE2BThroughGateway(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	a := f.nodes["n2a"].add(time.Now())
	b := f.nodes["n3b"].add(time.Now())

	resp, body := f.do("POST", "/e2b/sandboxes", "", `{"templateID":"base"}`, "X-API-KEY", f.key)
	var created struct {
		SandboxID, EnvdAccessToken string
		Domain                     *string
	}
	json.Unmarshal([]byte(body), &created)
	if resp.StatusCode != 201 || !strings.HasPrefix(created.SandboxID, "n") || created.EnvdAccessToken != f.key {
		t.Fatalf("E2B create: %d %s", resp.StatusCode, body)
	}
	n := f.nodes[created.SandboxID[:3]]
	if n == nil || n.creates.Load() != 1 || n.lastTenant != "acme" || n.lastAuth != "Bearer "+fleetKey {
		t.Fatalf("the create of %s did not reach its node as acme with the fleet key", created.SandboxID)
	}

	resp, body = f.do("GET", "/e2b/v2/sandboxes", "", "", "X-API-KEY", f.key)
	if resp.StatusCode != 200 || !strings.Contains(body, a.ID) || !strings.Contains(body, b.ID) {
		t.Errorf("E2B list: %d %s, want both nodes' sandboxes", resp.StatusCode, body)
	}
	for _, sb := range []string{a.ID, b.ID} {
		resp, body = f.do("GET", "/e2b/sandboxes/"+sb, "", "", "X-API-KEY", f.key)
		if resp.StatusCode != 200 || !strings.Contains(body, `"sandboxID":"`+sb+`"`) {
			t.Errorf("E2B info of %s: %d %s", sb, resp.StatusCode, body)
		}
	}
	// E2B_DOMAIN=<domain>: the control plane at api.<domain>.
	req, _ := http.NewRequest("GET", f.srv.URL+"/sandboxes/"+b.ID, nil)
	req.Host = "api.localhost"
	req.Header.Set("X-API-KEY", f.key)
	r, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 {
		t.Errorf("E2B info at api.localhost: %d", r.StatusCode)
	}
	if resp, body := f.do("GET", "/e2b/v2/sandboxes", "", "", "X-API-KEY", "nope"); resp.StatusCode != 401 {
		t.Errorf("E2B list with a wrong key: %d %s, want 401", resp.StatusCode, body)
	}
	// A tenant key in Authorization is not E2B's credential.
	if resp, _ := f.do("GET", "/e2b/v2/sandboxes", f.key, ""); resp.StatusCode != 401 {
		t.Errorf("E2B list with the key in Authorization: %d, want 401", resp.StatusCode)
	}
}

// The E2B door limits keys at the gateway as a node does (429 in E2B's
// shape), and a preview carrying E2B's traffic token (the key) goes to the
// node as the gateway acting for the tenant, without the token.
func TestE2BRateLimitAndTrafficToken(t *testing.T) {
	f := newFleet(t, "n2a")
	f.g.limiter = server.NewRateLimiter(0.001, 1)
	f.g.initFronts()
	if resp, body := f.do("GET", "/e2b/v2/sandboxes", "", "", "X-API-KEY", f.key); resp.StatusCode != 200 {
		t.Fatalf("first E2B list: %d %s", resp.StatusCode, body)
	}
	if resp, body := f.do("GET", "/e2b/v2/sandboxes", "", "", "X-API-KEY", f.key); resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" {
		t.Errorf("second E2B list: %d %s, want 429 with Retry-After", resp.StatusCode, body)
	}

	sb := f.nodes["n2a"].add(time.Now())
	req, _ := http.NewRequest("GET", f.srv.URL+"/", nil)
	req.Host = "8000-" + sb.ID + ".localhost"
	req.Header.Set(server.E2BTrafficTokenHeader, f.key)
	r, err := f.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 200 || f.nodes["n2a"].lastAuth != "Bearer "+fleetKey {
		t.Errorf("preview with E2B's traffic token: %d, node saw Authorization %q, want the fleet key", r.StatusCode, f.nodes["n2a"].lastAuth)
	}
	req.Header.Set(server.E2BTrafficTokenHeader, "nope")
	if r, err = f.client.Do(req); err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if r.StatusCode != 401 {
		t.Errorf("preview with a wrong traffic token: %d, want 401", r.StatusCode)
	}
}

// authHeader adds a bearer key to every request.
type authHeader struct{ key string }

func (a authHeader) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+a.key)
	return http.DefaultTransport.RoundTrip(r)
}

// agentbox's MCP server at the gateway's /mcp: the tools are listed, and
// sandbox_create is placed on a node as the key's tenant; a wrong key
// opens no session.
func TestMCPThroughGateway(t *testing.T) {
	f := newFleet(t, "n2a", "n3b")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	connect := func(key string) (*mcp.ClientSession, error) {
		cl := mcp.NewClient(&mcp.Implementation{Name: "gateway-test", Version: "1"}, nil)
		return cl.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: f.srv.URL + "/mcp", HTTPClient: &http.Client{Transport: authHeader{key}}}, nil)
	}
	cs, err := connect(f.key)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	tools, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, " "), "sandbox_create") {
		t.Fatalf("tools: %v", names)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "sandbox_create", Arguments: map[string]any{"template": "base"}})
	if err != nil {
		t.Fatal(err)
	}
	text := res.Content[0].(*mcp.TextContent).Text
	if res.IsError || !strings.Contains(text, "created sandbox n") {
		t.Fatalf("sandbox_create: %v %s", res.IsError, text)
	}
	if f.nodes["n2a"].creates.Load()+f.nodes["n3b"].creates.Load() != 1 {
		t.Error("the create did not reach exactly one node")
	}
	if _, err := connect("nope"); err == nil {
		t.Error("an MCP session with a wrong key was opened")
	}
}

// /mcp is served, not answered 501; /e2b is not a 501 prefix.
func TestMCPAndE2BServed(t *testing.T) {
	ns := NotServed()
	for _, served := range []string{"POST /mcp", "GET /mcp", "DELETE /mcp"} {
		if slices.Contains(ns, served) {
			t.Errorf("NotServed() lists %s", served)
		}
	}
	if slices.Contains(notServedPrefixes, "/e2b") {
		t.Error("notServedPrefixes lists /e2b")
	}
}
