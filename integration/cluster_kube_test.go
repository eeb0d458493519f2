package integration

import (
	"context"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
	"github.com/agentbox/agentbox/internal/daemon"
	"github.com/agentbox/agentbox/internal/kube"
	"github.com/agentbox/agentbox/internal/kube/kubetest"
)

// TestClusterKubernetes runs a fleet whose membership comes from a real
// kube-apiserver and etcd (built from the Go module proxy by
// scripts/install-k8s.sh): the node daemons, in network namespaces of
// their own, claim their ids and register as the node ServiceAccount of
// deploy/rbac.yaml; the gateway, with no [[fleet.node]], watches their
// AgentboxNodes and Leases as the gateway's. Then: sandboxes through the
// gateway on both nodes; a node killed is held down once its Lease
// expires and creates go elsewhere; restarted, it keeps its id and its
// sandboxes; a third node joins a running gateway.
func TestClusterKubernetes(t *testing.T) {
	k := kubetest.Start(t, kubetest.Options{BindAll: true})
	k.Apply(t, filepath.Join(k.Deploy, "namespace.yaml"), false)
	k.Apply(t, filepath.Join(k.Deploy, "rbac.yaml"), false)
	regAddr := startRegistryAt(t, "0.0.0.0")
	_, regPort, _ := net.SplitHostPort(regAddr)
	f := newFleetWith(t, 2, fleetOptions{kube: k, registryPort: regPort})
	ctx := context.Background()
	c := f.client

	rows := f.waitNodes(func(n api.FleetNode) bool { return n.Available && n.Source == "kubernetes" })
	t.Logf("membership from the cluster: %s, %s", rows[0].ID, rows[1].ID)
	// What the nodes registered: their claimed ids, URLs and certificates.
	list, err := k.Dyn.Resource(kube.NodeGVR).List(ctx, metav1.ListOptions{})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("AgentboxNodes: %v, %v", list, err)
	}
	for _, nd := range f.nodes {
		if nd.id == "na2" || nd.id == "nb3" || len(nd.id) != 3 {
			t.Fatalf("node kept id %q: not one it claimed", nd.id)
		}
		o, err := k.Dyn.Resource(kube.NodeGVR).Get(ctx, nd.id, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		url, _, _ := unstructured.NestedString(o.Object, "spec", "url")
		fp, _, _ := unstructured.NestedString(o.Object, "spec", "fingerprint")
		b, _ := os.ReadFile(filepath.Join(nd.dataDir, "tls", "cert.pem"))
		block, _ := pem.Decode(b)
		if url != "https://"+nd.addr || block == nil || fp != daemon.Fingerprint(block.Bytes) {
			t.Errorf("AgentboxNode %s: url %q fingerprint %q; want https://%s and its certificate's", nd.id, url, fp, nd.addr)
		}
	}

	// Sandboxes through the gateway land on both nodes and answer, and
	// none of it writes agentbox's objects in the cluster (nodes renew
	// only their Leases, on their own clock).
	before := k.Writes(t)
	perNode := map[string][]string{}
	for i := 0; i < 4; i++ {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil {
			t.Fatalf("create %d: %v", i, err)
		}
		perNode[sb.Node] = append(perNode[sb.Node], sb.ID)
		if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "echo $((6*7))"}); err != nil || strings.TrimSpace(res.Stdout) != "42" {
			t.Fatalf("exec in %s: %+v, %v", sb.ID, res, err)
		}
	}
	if len(perNode) != 2 {
		t.Fatalf("4 creates went to %d nodes: %v", len(perNode), perNode)
	}
	for r, n := range k.Writes(t) {
		if n != before[r] {
			t.Errorf("creates and execs wrote %v times to %q in the cluster", n-before[r], r)
		}
	}

	// The cluster's template catalog: an image no node has as a template
	// yet is pulled onto the node a create goes to.
	ref := f.registry + "/agentbox/catalog/busybox:1"
	if _, err := f.nodes[0].client.PushTemplate(ctx, "busybox", ref); err != nil {
		t.Fatal(err)
	}
	tplObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentboxTemplate",
		"metadata": map[string]any{"name": "bbcat"}, "spec": map[string]any{"name": "bbcat", "ref": ref}}}
	if _, err := k.Dyn.Resource(kube.TemplateGVR).Namespace(kubetest.Namespace).Create(ctx, tplObj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var fromCatalog *api.Sandbox
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(100 * time.Millisecond) {
		// (until the gateway's watch has brought the catalog entry)
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "bbcat"})
		if err == nil {
			fromCatalog = sb
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("create from the catalog's template: %v", err)
		}
	}
	perNode[fromCatalog.Node] = append(perNode[fromCatalog.Node], fromCatalog.ID)
	if res, err := c.Exec(ctx, fromCatalog.ID, api.ExecRequest{Shell: "echo catalog"}); err != nil || strings.TrimSpace(res.Stdout) != "catalog" {
		t.Fatalf("exec in a sandbox of the catalog's template: %+v, %v", res, err)
	}

	// A warm pool for the whole fleet: every node keeps one ready member,
	// the gateway lists both, a create is served from one, and deleting
	// it empties the nodes' pools.
	pools := k.Dyn.Resource(kube.PoolGVR).Namespace(kubetest.Namespace)
	wp := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentboxWarmPool",
		"metadata": map[string]any{"name": "busybox"}, "spec": map[string]any{"template": "busybox", "size": int64(1)}}}
	if _, err := pools.Create(ctx, wp, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPools(t, c, func(ps []api.PoolStatus) bool {
		return len(ps) == 2 && ps[0].Ready == 1 && ps[1].Ready == 1 && ps[0].Node != ps[1].Node
	})
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
	if err != nil {
		t.Fatal(err)
	}
	perNode[sb.Node] = append(perNode[sb.Node], sb.ID)
	waitPools(t, c, func(ps []api.PoolStatus) bool { return len(ps) == 2 && ps[0].Served+ps[1].Served == 1 })
	if err := pools.Delete(ctx, "busybox", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPools(t, c, func(ps []api.PoolStatus) bool { return len(ps) == 0 })

	// A node killed: its Lease expires (3 s here) and the gateway holds it
	// down, says why, and places elsewhere.
	dead, live := f.nodes[1], f.nodes[0]
	// (The node's count of its sandboxes is sampled: wait until the
	// gateway's last poll has them.)
	f.waitNodes(func(n api.FleetNode) bool {
		return n.Status != nil && n.Status.Sandboxes == len(perNode[n.ID])
	})
	dead.kill(syscall.SIGKILL)
	rows = f.waitNodes(func(n api.FleetNode) bool {
		if n.ID == dead.id {
			return !n.Available && strings.Contains(n.Lease, "expired")
		}
		return n.Available
	})
	for _, r := range rows {
		if r.ID == dead.id && r.LostSandboxes != len(perNode[dead.id]) {
			t.Errorf("the dead node's row: lost_sandboxes %d, want %d", r.LostSandboxes, len(perNode[dead.id]))
		}
	}
	for i := 0; i < 3; i++ {
		sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{})
		if err != nil || sb.Node != live.id {
			t.Fatalf("create with a node down: %+v, %v; want it on %s", sb, err, live.id)
		}
		perNode[sb.Node] = append(perNode[sb.Node], sb.ID)
	}

	// Restarted, it keeps its id (data_dir/node_id), renews its Lease and
	// has its sandboxes back.
	f.runNode(dead)
	f.waitNodes(func(n api.FleetNode) bool { return n.Available && n.Lease == "" })
	for _, id := range perNode[dead.id] {
		if res, err := c.Exec(ctx, id, api.ExecRequest{Shell: "echo back"}); err != nil || strings.TrimSpace(res.Stdout) != "back" {
			t.Fatalf("exec in %s after its node restarted: %+v, %v", id, res, err)
		}
	}

	// A third node joins the running gateway: no config change, no restart.
	third := f.startNode(2, filepath.Join(f.dir, "gateway.key"))
	f.importBusybox(third)
	f.nodes = append(f.nodes, third)
	f.waitNodes(func(n api.FleetNode) bool { return n.Available })
	sb, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{Node: third.id})
	if err != nil || sb.Node != third.id {
		t.Fatalf("create on the node that joined: %+v, %v", sb, err)
	}
	if res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Shell: "hostname"}); err != nil || res.ExitCode != 0 {
		t.Fatalf("exec on the node that joined: %+v, %v", res, err)
	}
}

// waitPools waits until the gateway's GET /v1/pools satisfies ok.
func waitPools(t *testing.T, c *client.Client, ok func([]api.PoolStatus) bool) {
	t.Helper()
	var last []api.PoolStatus
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		ps, err := c.Pools(context.Background())
		if err == nil && ok(ps) {
			return
		}
		last = ps
	}
	t.Fatalf("the fleet's warm pools never reached the state wanted: %+v", last)
}
