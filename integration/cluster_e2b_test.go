package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// TestClusterE2BMCP runs the E2B-compatible API and agentbox's MCP server
// through a fleet's gateway (docs/cluster.md, "E2B and MCP through a
// gateway"), with a tenant key of the gateway: the unmodified e2b and
// @e2b/code-interpreter SDKs (integration/e2b, configured with only the
// variables docs/e2b.md names, pointed at the gateway), agentbox's MCP
// tools with the go-sdk client, and an MCP server hosted in a sandbox,
// reached through the gateway's reverse proxy. base is on one node and
// python on the other: E2B's and the tools' creates are placed as any.
func TestClusterE2BMCP(t *testing.T) {
	needBase(t)
	if !env.hasPython {
		t.Fatal("no python template in the build cache (scripts/build-template.sh python --no-import; make test builds it)")
	}
	f := newFleet(t, 2)
	ctx := context.Background()
	start := time.Now()
	f.importTemplate(f.nodes[0], "base")
	f.importTemplate(f.nodes[1], "python")
	t.Logf("imported base and python in %v", time.Since(start).Round(time.Millisecond))

	const tenant = "e2bfleet"
	if _, err := f.client.CreateTenant(ctx, api.CreateTenantRequest{Name: tenant}); err != nil {
		t.Fatal(err)
	}
	k, err := f.client.CreateKey(ctx, api.CreateKeyRequest{Tenant: tenant, Name: "e2b"})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := client.New(client.WithHost("http://"+f.gwAddr), client.WithAPIKey(k.Secret), client.WithoutEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	e2bEnv := []string{
		"E2B_API_URL=http://" + f.gwAddr + "/e2b",
		"E2B_SANDBOX_URL=http://" + f.gwAddr + "/e2b",
		"E2B_API_KEY=" + k.Secret,
	}

	t.Run("e2b SDK", func(t *testing.T) {
		runNodeTests(t, []string{"sdk.test.mjs"}, e2bEnv)
	})
	t.Run("e2b code interpreter SDK", func(t *testing.T) {
		runNodeTests(t, []string{"interpreter.test.mjs"}, e2bEnv)
	})

	t.Run("MCP tools", func(t *testing.T) {
		cs := mcpConnect(t, tc, "/mcp")
		tools, err := cs.ListTools(ctx, nil)
		if err != nil || len(tools.Tools) < 13 {
			t.Fatalf("tools through the gateway: %v, %d", err, len(tools.Tools))
		}
		// One sandbox per node: the template decides where it goes.
		for _, c := range []struct{ template, node string }{{"base", f.nodes[0].id}, {"python", f.nodes[1].id}} {
			out := mustTool(t, cs, "sandbox_create", map[string]any{"template": c.template, "ttl": "5m"})
			m := createdID.FindStringSubmatch(out)
			if m == nil {
				t.Fatalf("sandbox_create answered %q, want the id", out)
			}
			id := m[1]
			if nd := f.nodeOf(id); nd == nil || nd.id != c.node {
				t.Fatalf("a %s sandbox made through the gateway's MCP is %s, want it on %s", c.template, id, c.node)
			}
			if out := mustTool(t, cs, "exec", map[string]any{"sandbox_id": id, "command": "echo via-gateway-$((6*7))"}); !strings.Contains(out, "via-gateway-42") {
				t.Errorf("exec through the gateway's MCP = %q", out)
			}
			mustTool(t, cs, "file_write", map[string]any{"sandbox_id": id, "path": "/tmp/g.txt", "content": "gateway file"})
			if got := mustTool(t, cs, "file_read", map[string]any{"sandbox_id": id, "path": "/tmp/g.txt"}); got != "gateway file" {
				t.Errorf("file_read = %q", got)
			}
			if out := mustTool(t, cs, "sandbox_list", nil); !strings.Contains(out, id) {
				t.Errorf("sandbox_list = %q, want %s in it", out, id)
			}
			mustTool(t, cs, "sandbox_destroy", map[string]any{"sandbox_id": id})
			if _, err := tc.GetSandbox(ctx, id); err == nil {
				t.Errorf("sandbox %s still there after sandbox_destroy", id)
			}
		}
	})

	t.Run("hosted MCP server", func(t *testing.T) {
		sb, err := tc.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "python", TTLSeconds: 300})
		if err != nil {
			t.Fatal(err)
		}
		defer tc.DestroySandbox(ctx, sb.ID)
		srv := hostTestServer(t, tc, sb.ID, "tools")
		cs := mcpConnect(t, tc, srv.Endpoint)
		cs2 := mcpConnect(t, tc, srv.Endpoint)
		mustShVia(t, tc, sb.ID, "mkdir -p /data && echo inside > /data/in.txt")
		if got := mustTool(t, cs, "list_dir", map[string]any{"path": "/data"}); got != "in.txt" {
			t.Errorf("list_dir /data through the gateway = %q", got)
		}
		if got := mustTool(t, cs2, "read_file", map[string]any{"path": "/data/in.txt"}); got != "inside\n" {
			t.Errorf("read_file from a second client through the gateway = %q", got)
		}
	})
}
