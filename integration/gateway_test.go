package integration

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/gateway"
	"github.com/agentbox/agentbox/internal/store"
)

// TestGatewayInFrontOfANode: the test daemon as a fleet node (node_id,
// the fleet key) behind an in-process gateway: a create through the
// gateway gets an id of the node's, and exec, a streamed exec, files, a
// PTY WebSocket, the list and destroy all work through it, for a tenant
// the node has never seen. The multi-node suite is integration/cluster_test.go.
func TestGatewayInFrontOfANode(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const secret = "integration-fleet-secret-0123456789abcdef"
	_, addr := restartAsFleetNode(t, dir, "n2a", secret)

	st, err := store.Open(ctx, filepath.Join(dir, "gw.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// A tenant of the gateway's only: the node has no record of it.
	if err := st.CreateTenant(ctx, &store.TenantRecord{Name: "gwonly"}); err != nil {
		t.Fatal(err)
	}
	key, _, err := auth.CreateKey(ctx, st, "gwonly", "t", false)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Nodes: []config.FleetNode{{ID: "n2a", URL: "http://" + addr}}, Key: secret,
		PollInterval: time.Second, Store: st, Auth: auth.New(st, filepath.Join(dir, "admin.key"), nil), PreviewDomain: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	g.Start(ctx)
	defer g.Close()
	if n := g.Nodes(); !n[0].Available {
		t.Fatalf("the node is not available: %+v", n[0])
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	c, err := client.New(client.WithHost(srv.URL), client.WithAPIKey(key), client.WithoutEnvironment())
	if err != nil {
		t.Fatal(err)
	}
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
	if err != nil {
		t.Fatalf("create through the gateway: %v", err)
	}
	defer c.DestroySandbox(ctx, sb.ID)
	if node, ok := api.NodeOfID(sb.ID); !ok || node != "n2a" || sb.Node != "n2a" {
		t.Fatalf("sandbox %s (node %q) does not carry node n2a", sb.ID, sb.Node)
	}
	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"sh", "-c", "echo hi; hostname"}})
	if err != nil || !strings.Contains(res.Stdout, "hi") {
		t.Fatalf("exec through the gateway: %+v, %v", res, err)
	}
	var out bytes.Buffer
	ev, err := c.ExecStream(ctx, sb.ID, api.ExecRequest{Cmd: []string{"cat"}}, strings.NewReader("streamed\n"), &out, nil)
	if err != nil || ev.ExitCode == nil || *ev.ExitCode != 0 || out.String() != "streamed\n" {
		t.Fatalf("streamed exec through the gateway: %q, %+v, %v", out.String(), ev, err)
	}
	if _, err := c.WriteFile(ctx, sb.ID, "/tmp/f", strings.NewReader("file body"), 0o644); err != nil {
		t.Fatal(err)
	}
	rc, err := c.ReadFile(ctx, sb.ID, "/tmp/f")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(rc)
	rc.Close()
	if string(b) != "file body" {
		t.Fatalf("file through the gateway: %q", b)
	}
	pty, err := c.CreatePTY(ctx, sb.ID, api.CreatePTYRequest{Cmd: []string{"sh"}})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := c.AttachPTY(ctx, sb.ID, pty.Pid)
	if err != nil {
		t.Fatalf("PTY WebSocket through the gateway: %v", err)
	}
	conn.Write([]byte("echo pty-$((6*7))\n"))
	var seen bytes.Buffer
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(seen.String(), "pty-42") && time.Now().Before(deadline) {
		buf := make([]byte, 4096)
		n, err := conn.Read(buf)
		seen.Write(buf[:n])
		if err != nil {
			break
		}
	}
	conn.Close()
	if !strings.Contains(seen.String(), "pty-42") {
		t.Errorf("PTY through the gateway read %q", seen.String())
	}
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != 1 || list[0].ID != sb.ID {
		t.Errorf("list through the gateway: %+v, %v", list, err)
	}
	// The node's own admin sees the sandbox under the gateway's tenant.
	if got, err := env.client.GetSandbox(ctx, sb.ID); err != nil || got.Node != "n2a" {
		t.Errorf("the node's view: %+v, %v", got, err)
	}
	// A node key cannot act as the gateway's tenant with the headers.
	req, _ := http.NewRequest("GET", "http://"+addr+"/v1/sandboxes/"+sb.ID, nil)
	_, _, other := tenantKey(t, "gwspoof", nil)
	req.Header.Set("Authorization", "Bearer "+other.Secret)
	req.Header.Set(auth.TenantHeader, "gwonly")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Errorf("another tenant's key with %s: gwonly: %v %v, want 404", auth.TenantHeader, resp.StatusCode, err)
	}
	if err := c.DestroySandbox(ctx, sb.ID); err != nil {
		t.Errorf("destroy through the gateway: %v", err)
	}
}
