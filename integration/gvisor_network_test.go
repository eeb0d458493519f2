package integration

// Networking on the gvisor tier: egress none, internet and custom hold on
// the host side (the veth, chain and limits of the container tier, with
// gVisor's netstack behind them), and preview URLs reach a server in a
// gvisor sandbox.

import (
	"context"
	"errors"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/errdefs"
)

func TestGvisorNetwork(t *testing.T) {
	needGvisor(t)
	needBase(t)
	ctx := context.Background()
	ti := newTestInternet(t)
	hostPort := hostListener(t)
	inet := ti.pub + ":8080"
	gv := func(n *api.Network) string {
		return newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: "gvisor", Network: n})
	}

	t.Run("none", func(t *testing.T) {
		id := gv(nil)
		got, ifs := reachFrom(t, id, inet, ti.hostAddr+":"+hostPort)
		if ifs != "lo" || got[inet] == "connected" || got[ti.hostAddr+":"+hostPort] == "connected" {
			t.Errorf("egress none: %v, interfaces %q; want nothing reachable, only lo", got, ifs)
		}
	})

	a := gv(&api.Network{Egress: api.EgressInternet})
	sbA, err := env.client.GetSandbox(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	addrA, _, _ := strings.Cut(sbA.Network.Address, "/")
	gwA := addrA[:strings.LastIndex(addrA, ".")] + "." + strconv.Itoa(lastOctet(addrA)-1)
	t.Run("internet", func(t *testing.T) {
		if _, err := netlink.LinkByName("abx" + a); err != nil {
			t.Fatalf("no host veth for the gvisor sandbox: %v", err)
		}
		want := map[string]bool{
			inet:                         true,
			ti.pub2 + ":8081":            true,
			gwA + ":" + hostPort:         false, // the host through the gateway
			gwA + ":7423":                false,
			ti.hostAddr + ":" + hostPort: false, // the host's other address
			ti.linkLocal + ":8080":       false,
			"169.254.169.254:80":         false,
			"100.100.100.200:80":         false,
			ti.private + ":8080":         false,
		}
		expectReach(t, "gvisor internet", a, want)
		if _, ifs := reachFrom(t, a); ifs != "eth0,lo" {
			t.Errorf("interfaces %q, want eth0,lo", ifs)
		}
		if out := mustSh(t, a, "cat /etc/resolv.conf"); !strings.Contains(out, "nameserver "+gwA) {
			t.Errorf("/etc/resolv.conf does not name the sandbox's resolver %s: %q", gwA, out)
		}
	})
	t.Run("custom", func(t *testing.T) {
		c := gv(&api.Network{Egress: api.EgressCustom, Allow: []string{"198.18.0.0/15:8080", ti.private}, Deny: []string{ti.pub2}})
		expectReach(t, "gvisor custom", c, map[string]bool{
			inet:                   true,
			ti.pub + ":8081":       false,
			ti.pub2 + ":8080":      false,
			ti.private + ":8080":   true,
			ti.linkLocal + ":8080": false,
			addrA + ":8080":        false, // a sibling
		})
	})
	t.Run("runtime", func(t *testing.T) {
		if _, err := env.client.SetEgress(ctx, a, api.EgressCustom, []string{ti.pub2}, nil); err != nil {
			t.Fatal(err)
		}
		expectReach(t, "gvisor custom at runtime", a, map[string]bool{inet: false, ti.pub2 + ":8080": true})
		_, err := env.client.SetEgress(ctx, a, api.EgressNone, nil, nil)
		if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "fixed when it starts") {
			t.Errorf("internet to none on gvisor: %v, want failed_precondition", err)
		}
		if _, err := env.client.SetEgress(ctx, a, api.EgressInternet, nil, nil); err != nil {
			t.Fatal(err)
		}
		expectReach(t, "gvisor internet again", a, map[string]bool{inet: true})
	})
	t.Run("limits", func(t *testing.T) {
		s := newLimitServers(t, ti)
		id := gv(&api.Network{Egress: api.EgressInternet, MaxConnections: 4, BandwidthMbit: 8})
		uploadLimitsScript(t, id)
		checkConnLimit(t, id, s, 4)
		checkBandwidth(t, id, s, 8, 2_000_000)
	})
	t.Run("pause to disk", func(t *testing.T) {
		// A restore rebuilds the sandbox in a fresh namespace with the
		// same address: its network must work again.
		id := gv(&api.Network{Egress: api.EgressInternet})
		sb, _ := env.client.GetSandbox(ctx, id)
		if _, err := env.client.PauseSandboxToDisk(ctx, id); err != nil {
			t.Fatal(err)
		}
		if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		after, _ := env.client.GetSandbox(ctx, id)
		if after.Network.Address != sb.Network.Address {
			t.Errorf("address %s after the restore, was %s", after.Network.Address, sb.Network.Address)
		}
		expectReach(t, "gvisor internet after pause to disk", id, map[string]bool{inet: true, ti.private + ":8080": false})
	})
	t.Run("reset", func(t *testing.T) {
		// A reset boots a new init: a fresh namespace, the same address.
		id := gv(&api.Network{Egress: api.EgressInternet, MaxConnections: 4})
		sb, _ := env.client.GetSandbox(ctx, id)
		after, err := env.client.ResetSandbox(ctx, id, "")
		if err != nil {
			t.Fatal(err)
		}
		if after.Network.Address != sb.Network.Address || after.Network.MaxConnections != 4 {
			t.Errorf("after reset: %+v, was %+v", after.Network, sb.Network)
		}
		expectReach(t, "gvisor internet after reset", id, map[string]bool{inet: true, ti.private + ":8080": false})
		if !nftHasConnLimit(t, id) {
			t.Error("no connection limit after reset")
		}
	})
	t.Run("fork with memory", func(t *testing.T) {
		// Children restore the parent's memory into namespaces of their
		// own, each with a new address: each must reach out from it.
		id := gv(&api.Network{Egress: api.EgressInternet})
		kids, err := env.client.ForkSandboxWithMemory(ctx, id, 2)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range kids {
			t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), k.ID) })
		}
		seen := map[string]bool{}
		for _, k := range kids {
			if k.Network == nil || k.Network.Address == "" || seen[k.Network.Address] {
				t.Fatalf("child %s network %+v", k.ID, k.Network)
			}
			seen[k.Network.Address] = true
			expectReach(t, "gvisor memory fork child", k.ID, map[string]bool{inet: true, ti.private + ":8080": false})
		}
		expectReach(t, "gvisor memory fork parent", id, map[string]bool{inet: true})
	})
	t.Run("preview", func(t *testing.T) {
		id := gv(nil)
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		mustSh(t, id, "mkdir -p /tmp/site && echo hello-gvisor > /tmp/site/index.txt && cd /tmp/site && (python3 -m http.server 8001 --bind 127.0.0.1 >/dev/null 2>&1 &)")
		hc := unixHTTP()
		get := func(req *http.Request) (int, string) {
			resp, err := hc.Do(req)
			if err != nil {
				return 0, err.Error()
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(b)
		}
		var status int
		var body string
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if status, body = get(previewReq(t, sb, 8001, "/index.txt", true)); status == 200 {
				break
			}
		}
		if status != 200 || body != "hello-gvisor\n" {
			t.Fatalf("host form: %d %q", status, body)
		}
		req, _ := http.NewRequest("GET", "http://daemon"+client.PortPath(id, 8001)+"index.txt", nil)
		req.Header.Set("Authorization", "Bearer "+env.key)
		if status, body = get(req); status != 200 || body != "hello-gvisor\n" {
			t.Fatalf("path form: %d %q", status, body)
		}
		if status, _ = get(previewReq(t, sb, 8001, "/index.txt", false)); status != 401 {
			t.Errorf("without the token: %d, want 401", status)
		}
	})
	t.Run("destroy", func(t *testing.T) {
		if err := env.client.DestroySandbox(ctx, a); err != nil {
			t.Fatal(err)
		}
		if _, err := netlink.LinkByName("abx" + a); err == nil {
			t.Errorf("veth abx%s is left after destroy", a)
		}
		if nftHasConnLimit(t, a) {
			t.Error("the connection limit rule is left after destroy")
		}
		if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), "/sandboxes/"+a+"/netns") {
			t.Errorf("the sandbox's network namespace is still mounted")
		}
	})
}
