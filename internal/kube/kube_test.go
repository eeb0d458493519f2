package kube_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/kube"
	"github.com/agentbox/agentbox/internal/kube/kubetest"
)

// One control plane for the package's tests: starting one takes seconds.
var env *kubetest.Env

func TestMain(m *testing.M) {
	code := m.Run()
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	os.Exit(code)
}

func start(t *testing.T) *kubetest.Env {
	t.Helper()
	if env == nil {
		env = kubetest.Start(&keep{t}, kubetest.Options{})
	}
	return env
}

// keep is a testing.TB whose cleanups run at the end of the binary, not
// of the first test that asked: the control plane serves them all.
type keep struct{ *testing.T }

func (k *keep) Cleanup(f func()) { cleanups = append(cleanups, f) }

var cleanups []func()

// asAccount applies deploy/'s namespace and RBAC and returns a client
// that authenticates as that ServiceAccount of theirs.
func asAccount(t *testing.T, e *kubetest.Env, account string) *kube.Client {
	t.Helper()
	e.Apply(t, filepath.Join(e.Deploy, "namespace.yaml"), false)
	e.Apply(t, filepath.Join(e.Deploy, "rbac.yaml"), false)
	c, err := kube.NewForConfig(e.ServiceAccount(t, account), kubetest.Namespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// members collects what WatchMembers hands over.
type members struct{ ch chan []kube.Member }

func (m *members) set(ms []kube.Member) { m.ch <- ms }

// wait returns the first fleet ok accepts.
func (m *members) wait(t *testing.T, what string, ok func([]kube.Member) bool) []kube.Member {
	t.Helper()
	deadline := time.After(2 * time.Minute)
	var last []kube.Member
	for {
		select {
		case ms := <-m.ch:
			if ok(ms) {
				return ms
			}
			last = ms
		case <-deadline:
			t.Fatalf("%s: never seen; the last fleet was %+v", what, last)
		}
	}
}

// A node claims an id, registers and renews its Lease; a gateway's watch
// sees it live, sees it held down once the Lease expires, and live again
// when it renews; an id stays with its host and data dir.
func TestRegisterAndWatch(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Both roles as the ServiceAccounts deploy/rbac.yaml binds.
	nodeC, gwC := asAccount(t, e, "agentbox-node"), asAccount(t, e, "agentbox-gateway")
	seen := &members{ch: make(chan []kube.Member, 64)}
	if err := gwC.WatchMembers(ctx, seen.set); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	idFile := filepath.Join(dir, "node_id")
	n := kube.Node{Host: "host-a", DataDir: "/var/lib/agentbox", URL: "https://198.19.250.2:7423", Tiers: []string{"container"}}
	id, err := nodeC.ClaimNodeID(ctx, idFile, n)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := nodeC.ClaimNodeID(ctx, idFile, n); err != nil || again != id {
		t.Fatalf("second claim with the id file: %q, %v; want %q", again, err, id)
	}
	os.Remove(idFile) // a wiped data dir at the same place gets its id back
	if again, err := nodeC.ClaimNodeID(ctx, idFile, n); err != nil || again != id {
		t.Fatalf("claim after the id file was removed: %q, %v; want %q", again, err, id)
	}
	other := n
	other.DataDir = "/var/lib/agentbox-2" // a second daemon on the host
	id2, err := nodeC.ClaimNodeID(ctx, filepath.Join(dir, "node_id2"), other)
	if err != nil || id2 == id {
		t.Fatalf("a second daemon's claim: %q, %v; want an id other than %q", id2, err, id)
	}
	if w := e.Writes(t); w["agentboxnodes"] < 2 {
		t.Errorf("the API server's metrics show %v writes of agentboxnodes after two claims", w["agentboxnodes"])
	}
	fp := strings.Repeat("ab", 32)
	n.ID, n.Fingerprint = id, fp
	nctx, stopNode := context.WithCancel(ctx)
	if err := nodeC.Register(nctx, n, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, "the node live", func(ms []kube.Member) bool {
		for _, m := range ms {
			if m.ID == id {
				return m.Down == "" && m.URL == n.URL && m.Fingerprint == fp
			}
		}
		return false
	})
	// Another host cannot take the id.
	thief := n
	thief.Host = "host-b"
	if err := nodeC.Register(ctx, thief, 2*time.Second); err == nil || !strings.Contains(err.Error(), "kubectl delete agentboxnode "+id) {
		t.Fatalf("registering another host under %s: %v, want a refusal that says what to do", id, err)
	}
	// The node stops renewing (it died): held down once the Lease expires.
	stopNode()
	ms := seen.wait(t, "the node held down", func(ms []kube.Member) bool {
		for _, m := range ms {
			if m.ID == id {
				return m.Down != ""
			}
		}
		return false
	})
	t.Logf("held down: %+v", ms)
	if err := nodeC.Register(ctx, n, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, "the node live again", func(ms []kube.Member) bool {
		for _, m := range ms {
			if m.ID == id {
				return m.Down == ""
			}
		}
		return false
	})
	// Deleting its AgentboxNode takes it out of the fleet.
	if err := e.Dyn.Resource(kube.NodeGVR).Delete(ctx, id, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, "the node gone", func(ms []kube.Member) bool {
		for _, m := range ms {
			if m.ID == id {
				return false
			}
		}
		return true
	})
	// The node's account may not read what it does not need.
	dyn, err := dynamic.NewForConfig(e.ServiceAccount(t, "agentbox-node"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(kubetest.Namespace).List(ctx, metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Errorf("the node's ServiceAccount listing Secrets: %v, want forbidden", err)
	}
	if err := dyn.Resource(kube.NodeGVR).Delete(ctx, id2, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the node's ServiceAccount deleting an AgentboxNode: %v, want forbidden", err)
	}
}

// The CRD refuses a name that is not a node id.
func TestNodeNameValidated(t *testing.T) {
	e := start(t)
	n := kube.Node{ID: "NOT-AN-ID", Host: "h", URL: "https://198.19.250.2:7423"}
	c, err := kube.NewForConfig(e.Admin, kubetest.Namespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = c.Register(context.Background(), n, 2*time.Second)
	if err == nil || !strings.Contains(err.Error(), "node_id") {
		t.Fatalf("registering %q: %v, want the CRD's refusal naming node_id", n.ID, err)
	}
}

// Every manifest of deploy/ (kubectl apply -k deploy/) passes a
// server-side dry run: the API server validates, defaults and admits each
// object (the DaemonSet's privileged pod, the gateway's restricted one,
// RBAC, the CRD) and stores none.
func TestDeployManifestsDryRun(t *testing.T) {
	e := start(t)
	b, err := os.ReadFile(filepath.Join(e.Deploy, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	var all map[string]any
	_ = yaml.Unmarshal(b, &all)
	for key := range all {
		// Plain resources only, so that applying each file in order is
		// what kustomize renders.
		if key != "resources" && key != "apiVersion" && key != "kind" {
			t.Errorf("kustomization.yaml has %q: the test applies only its resources; keep it plain or render it here", key)
		}
	}
	if len(k.Resources) < 6 {
		t.Fatalf("kustomization.yaml lists %d resources", len(k.Resources))
	}
	// The namespace must exist for its objects' dry runs (kubetest made it).
	kinds := map[string]int{}
	for _, r := range k.Resources {
		for _, o := range e.Apply(t, filepath.Join(e.Deploy, r), true) {
			kinds[o.GetKind()]++
		}
	}
	for _, want := range []string{"CustomResourceDefinition", "Namespace", "ServiceAccount", "ClusterRole", "Role", "ConfigMap", "DaemonSet", "Deployment", "Service", "NetworkPolicy"} {
		if kinds[want] == 0 {
			t.Errorf("no %s passed the dry run (got %v)", want, kinds)
		}
	}
	// A dry run stores nothing.
	if _, err := e.Dyn.Resource(schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "daemonsets"}).Namespace(kubetest.Namespace).Get(context.Background(), "agentbox-node", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the DaemonSet after a dry run: %v, want not found", err)
	}
}

// The configs deploy/config.yaml gives the daemons are valid configs.
func TestDeployConfigs(t *testing.T) {
	b, err := os.ReadFile("../../deploy/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cm struct {
		Data map[string]string `json:"data"`
	}
	if err := yaml.Unmarshal(b, &cm); err != nil {
		t.Fatal(err)
	}
	for name, role := range map[string]string{"node.toml": config.RoleNode, "gateway.toml": config.RoleGateway} {
		c, err := config.Parse(name, cm.Data[name])
		if err != nil {
			t.Errorf("deploy/config.yaml's %s: %v", name, err)
			continue
		}
		if c.Role != role || !c.Kubernetes.Enabled {
			t.Errorf("%s: role %q, kubernetes %v", name, c.Role, c.Kubernetes.Enabled)
		}
	}
}

// A node's watch of the fleet's warm pools, as the node's ServiceAccount:
// a pool made in the cluster comes, changed comes changed, deleted goes.
func TestWatchPools(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := asAccount(t, e, "agentbox-node")
	got := make(chan []kube.Pool, 16)
	if err := c.WatchPools(ctx, func(ps []kube.Pool) { got <- ps }); err != nil {
		t.Fatal(err)
	}
	wait := func(what string, ok func([]kube.Pool) bool) {
		t.Helper()
		deadline := time.After(time.Minute)
		for {
			select {
			case ps := <-got:
				if ok(ps) {
					return
				}
			case <-deadline:
				t.Fatalf("%s: not seen", what)
			}
		}
	}
	wait("none at first", func(ps []kube.Pool) bool { return len(ps) == 0 })
	res := e.Dyn.Resource(kube.PoolGVR).Namespace(kubetest.Namespace)
	pool := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentboxWarmPool",
		"metadata": map[string]any{"name": "py"}, "spec": map[string]any{"template": "python", "isolation": "gvisor", "size": int64(4), "cpu": "0.5", "egress": "internet"}}}
	if _, err := res.Create(ctx, pool, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("the pool", func(ps []kube.Pool) bool {
		return len(ps) == 1 && ps[0].Name == "py" && ps[0].Pool == config.WarmPool{Template: "python", Isolation: "gvisor", Size: 4, CPU: 0.5, Egress: "internet"}
	})
	bad := pool.DeepCopy()
	bad.SetName("bad")
	_ = unstructured.SetNestedField(bad.Object, int64(0), "spec", "size")
	if _, err := res.Create(ctx, bad, metav1.CreateOptions{}); err == nil {
		t.Error("the CRD took a pool of size 0")
	}
	if err := res.Delete(ctx, "py", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("no pool", func(ps []kube.Pool) bool { return len(ps) == 0 })
}

// The gateway's watch of the template catalog, as its ServiceAccount.
func TestWatchTemplates(t *testing.T) {
	e := start(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := asAccount(t, e, "agentbox-gateway")
	got := make(chan map[string]string, 16)
	if err := c.WatchTemplates(ctx, func(m map[string]string) { got <- m }); err != nil {
		t.Fatal(err)
	}
	res := e.Dyn.Resource(kube.TemplateGVR).Namespace(kubetest.Namespace)
	mk := func(obj, name, ref string) {
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "agentbox.dev/v1alpha1", "kind": "AgentboxTemplate",
			"metadata": map[string]any{"name": obj}, "spec": map[string]any{"name": name, "ref": ref}}}
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("py-b", "py", "198.19.250.1:5000/agentbox/py:2")
	mk("py-a", "py", "198.19.250.1:5000/agentbox/py:1") // the same template: the first object by name wins
	mk("busybox", "busybox", "198.19.250.1:5000/agentbox/busybox@sha256:"+strings.Repeat("ab", 32))
	deadline := time.After(time.Minute)
	for {
		select {
		case m := <-got:
			if len(m) == 2 && m["py"] == "198.19.250.1:5000/agentbox/py:1" && strings.HasSuffix(m["busybox"], strings.Repeat("ab", 32)) {
				return
			}
		case <-deadline:
			t.Fatal("the catalog never held both templates")
		}
	}
}
