package integration

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// TestCluster runs a real fleet on this host (fleet_test.go: two node
// daemons, each in a network namespace of its own, and a gateway) and uses
// it as a user would, through the gateway only.
func TestCluster(t *testing.T) {
	f := newFleet(t, 2)
	ctx := context.Background()
	c := f.client

	// Creates spread over the nodes, and each id names the node that runs it.
	var ids []string
	perNode := map[string]int{}
	for i := 0; i < 6; i++ {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d through the gateway: %v", i, err)
		}
		nd := f.nodeOf(sb.ID)
		if nd == nil || sb.Node != nd.id {
			t.Fatalf("sandbox %s (node %q) names no node of the fleet", sb.ID, sb.Node)
		}
		if _, err := nd.client.GetSandbox(ctx, sb.ID); err != nil {
			t.Fatalf("sandbox %s is not on node %s: %v", sb.ID, nd.id, err)
		}
		perNode[nd.id]++
		ids = append(ids, sb.ID)
	}
	for _, nd := range f.nodes {
		if perNode[nd.id] == 0 {
			t.Fatalf("no create of 6 went to node %s: %v", nd.id, perNode)
		}
	}
	list, err := c.ListSandboxes(ctx, client.ListOptions{})
	if err != nil || len(list) != len(ids) {
		t.Fatalf("the gateway lists %d sandboxes (%v), want %d", len(list), err, len(ids))
	}

	t.Run("exec, streams, files and terminals", func(t *testing.T) {
		for _, id := range ids[:2] {
			res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "echo out; echo err >&2; exit 3"})
			if err != nil || res.Stdout != "out\n" || res.Stderr != "err\n" || res.ExitCode != 3 {
				t.Fatalf("exec through the gateway: %+v, %v", res, err)
			}
			// A streamed exec delivers output while the command runs.
			pr, pw := io.Pipe()
			got := make(chan string, 1)
			go func() {
				b := make([]byte, 5)
				_, _ = io.ReadFull(pr, b)
				got <- string(b)
				_, _ = io.Copy(io.Discard, pr)
			}()
			done := make(chan error, 1)
			go func() {
				_, err := c.ExecStream(ctx, id, api.ExecRequest{Shell: "echo first; sleep 30"}, nil, pw, io.Discard)
				pw.Close()
				done <- err
			}()
			select {
			case s := <-got:
				if s != "first" {
					t.Fatalf("streamed exec gave %q", s)
				}
			case err := <-done:
				t.Fatalf("the streamed exec ended before its first line arrived: %v", err)
			case <-time.After(20 * time.Second):
				t.Fatal("a streamed exec's first line did not arrive through the gateway within 20 s (buffered?)")
			}
			// Files both ways.
			payload := bytes.Repeat([]byte("agentbox"), 1<<16)
			if _, err := c.WriteFile(ctx, id, "/root/blob", bytes.NewReader(payload), 0o644); err != nil {
				t.Fatal(err)
			}
			rc, err := c.ReadFile(ctx, id, "/root/blob")
			if err != nil {
				t.Fatal(err)
			}
			back, _ := io.ReadAll(rc)
			rc.Close()
			if !bytes.Equal(back, payload) {
				t.Fatalf("file round trip through the gateway: %d bytes back, want %d", len(back), len(payload))
			}
			// A terminal over WebSocket.
			pctx, cancel := context.WithTimeout(ctx, time.Minute)
			sess, err := c.CreatePTY(pctx, id, api.CreatePTYRequest{Cmd: []string{"/bin/sh"}, Cols: 80, Rows: 24})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			conn, err := c.AttachPTY(pctx, id, sess.Pid)
			if err != nil {
				cancel()
				t.Fatalf("PTY WebSocket through the gateway: %v", err)
			}
			scr := watchScreen(conn)
			conn.Write([]byte("echo pty-$((6*7))\r"))
			scr.waitFor(t, 0, "pty-42")
			conn.Write([]byte("exit\r"))
			<-scr.done
			conn.Close()
			cancel()
		}
	})

	t.Run("preview URLs", func(t *testing.T) {
		id := ids[0]
		mustShVia(t, c, id, "mkdir -p /tmp/site && echo hello-fleet > /tmp/site/index.txt && (busybox httpd -p 127.0.0.1:8000 -h /tmp/site &)")
		sb, err := c.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		u, err := client.PreviewURL(sb, 8000)
		if err != nil || !strings.Contains(u, "8000-"+id+".localhost:"+strings.Split(f.gwAddr, ":")[1]) {
			t.Fatalf("preview URL %q (%v) does not name the gateway %s", u, err, f.gwAddr)
		}
		var status int
		var body string
		for i := 0; i < 100; i++ {
			req, _ := http.NewRequest("GET", "http://"+f.gwAddr+"/index.txt", nil)
			req.Host = fmt.Sprintf("8000-%s.localhost:%s", id, strings.Split(f.gwAddr, ":")[1])
			req.Header.Set(api.PreviewTokenHeader, sb.Network.PreviewToken)
			if resp, err := http.DefaultClient.Do(req); err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				status, body = resp.StatusCode, string(b)
				if status == 200 {
					break
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status != 200 || body != "hello-fleet\n" {
			t.Fatalf("preview through the gateway: %d %q", status, body)
		}
	})

	t.Run("tenants", func(t *testing.T) {
		var keyA string
		tenantA := "fleet-a-" + randHex(2)
		mk := func(name string) *client.Client {
			if _, err := c.CreateTenant(ctx, api.CreateTenantRequest{Name: name}); err != nil {
				t.Fatal(err)
			}
			k, err := c.CreateKey(ctx, api.CreateKeyRequest{Tenant: name, Name: "k"})
			if err != nil {
				t.Fatal(err)
			}
			if name == tenantA {
				keyA = k.Secret
			}
			tc, err := client.New(client.WithHost("http://"+f.gwAddr), client.WithAPIKey(k.Secret), client.WithoutEnvironment())
			if err != nil {
				t.Fatal(err)
			}
			return tc
		}
		a, b := mk(tenantA), mk("fleet-b-"+randHex(2))
		sb, err := a.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatal(err)
		}
		defer a.DestroySandbox(ctx, sb.ID)
		if res, err := a.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo mine"}); err != nil || res.Stdout != "mine\n" {
			t.Fatalf("a tenant's exec on its own sandbox: %+v, %v", res, err)
		}
		if _, err := b.Exec(ctx, sb.ID, api.ExecRequest{Shell: "true"}); err == nil {
			t.Fatal("another tenant ran a command in a tenant's sandbox through the gateway")
		}
		if l, err := b.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(l) != 0 {
			t.Fatalf("another tenant lists %d sandboxes (%v), want none", len(l), err)
		}
		if l, err := a.ListSandboxes(ctx, client.ListOptions{}); err != nil || len(l) != 1 || l[0].ID != sb.ID {
			t.Fatalf("the tenant lists %+v (%v), want its one sandbox", l, err)
		}
		// A key the gateway made means nothing to a node: nodes trust only
		// the gateway's key.
		nd := f.nodeOf(sb.ID)
		hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
		req, _ := http.NewRequest("GET", "https://"+nd.addr+"/v1/sandboxes/"+sb.ID, nil)
		req.Header.Set("Authorization", "Bearer "+keyA)
		req.Header.Set("Agentbox-Tenant", tenantA)
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("a gateway tenant's key sent straight to a node: %d, want 401", resp.StatusCode)
		}
	})

	t.Run("the SDK behaviour suite", func(t *testing.T) {
		// base on one node, python on the other: the gateway places each
		// create on a node that holds its template.
		needBase(t)
		if !env.hasPython {
			t.Fatal("no python template in the build cache (scripts/build-template.sh python --no-import; make test builds it)")
		}
		start := time.Now()
		f.importTemplate(f.nodes[0], "base")
		f.importTemplate(f.nodes[1], "python")
		t.Logf("imported base and python in %v", time.Since(start).Round(time.Millisecond))
		runBehaviourSuite(t, c)
	})

	t.Run("gateway restart loses nothing", func(t *testing.T) {
		f.gw.kill(syscall.SIGKILL)
		f.startGateway("")
		l, err := f.client.ListSandboxes(ctx, client.ListOptions{})
		if err != nil || len(l) != len(ids) {
			t.Fatalf("after a gateway restart it lists %d (%v), want %d", len(l), err, len(ids))
		}
		if res, err := f.client.Exec(ctx, ids[1], api.ExecRequest{Shell: "cat /root/blob | wc -c"}); err != nil || strings.TrimSpace(res.Stdout) != fmt.Sprint(8<<16) {
			t.Fatalf("exec after a gateway restart: %+v, %v", res, err)
		}
	})

	t.Run("a node killed", func(t *testing.T) {
		c := f.client
		dead := f.nodes[1]
		dead.kill(syscall.SIGKILL)
		f.waitNodes(func(n api.FleetNode) bool { return n.Available == (n.ID != dead.id) })
		// Its sandboxes are reported unavailable, not missing.
		var deadID string
		for _, id := range ids {
			if f.nodeOf(id) == dead {
				deadID = id
			}
		}
		req, _ := http.NewRequest("POST", "http://"+f.gwAddr+"/v1/sandboxes/"+deadID+"/exec", strings.NewReader(`{"shell":"true"}`))
		req.Header.Set("Authorization", "Bearer "+f.gw.key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var eb api.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || eb.Error.Code != "node_unavailable" {
			t.Fatalf("exec on a dead node's sandbox: %d %+v; want 503 node_unavailable", resp.StatusCode, eb)
		}
		// A list says which node it could not ask, and holds what the
		// others run.
		req, _ = http.NewRequest("GET", "http://"+f.gwAddr+"/v1/sandboxes", nil)
		req.Header.Set("Authorization", "Bearer "+f.gw.key)
		resp, err = http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var page api.ListSandboxesResponse
		_ = json.NewDecoder(resp.Body).Decode(&page)
		resp.Body.Close()
		if got := resp.Header.Get("Agentbox-Partial"); got != dead.id {
			t.Fatalf("a list with node %s down: Agentbox-Partial %q", dead.id, got)
		}
		for _, sb := range page.Sandboxes {
			if f.nodeOf(sb.ID) == dead {
				t.Fatalf("a list with node %s down holds its sandbox %s", dead.id, sb.ID)
			}
		}
		if len(page.Sandboxes) == 0 {
			t.Fatal("a list with one node down holds nothing of the node that lives")
		}
		// Creates go to the nodes that live.
		for i := 0; i < 3; i++ {
			sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
			if err != nil {
				t.Fatalf("create with a node down: %v", err)
			}
			if f.nodeOf(sb.ID) == dead {
				t.Fatalf("a create went to the dead node: %s", sb.ID)
			}
		}
	})
}

// mustShVia runs script in sandbox id through client c and returns its
// stdout, failing the test on an error or a non-zero exit.
func mustShVia(t *testing.T, c *client.Client, id, script string) string {
	t.Helper()
	res, err := c.Exec(context.Background(), id, api.ExecRequest{Shell: script})
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("%s: %+v, %v", script, res, err)
	}
	return res.Stdout
}
