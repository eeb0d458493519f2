package kube_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/auth"
	"github.com/agentbox/agentbox/internal/gateway"
	"github.com/agentbox/agentbox/internal/kube"
	"github.com/agentbox/agentbox/internal/kube/kubetest"
	"github.com/agentbox/agentbox/internal/store"
)

// replica is one gateway with [kubernetes] tenants: its store, its own
// admin key, its API.
type replica struct {
	st    *store.Store
	admin string
	url   string
}

func newReplica(t *testing.T, e *kubetest.Env, before func(*store.Store)) *replica {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dir := t.TempDir()
	st, err := store.Open(ctx, filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	secret, _, err := auth.EnsureAdminKey(ctx, st, dir)
	if err != nil {
		t.Fatal(err)
	}
	if before != nil {
		before(st)
	}
	k, _ := st.KeyByHash(ctx, auth.Hash(secret))
	c, err := kube.NewForConfig(e.ServiceAccount(t, "agentbox-gateway"), kubetest.Namespace, nil)
	if err != nil {
		t.Fatal(err)
	}
	shared, err := c.SyncTenants(ctx, st, k.ID)
	if err != nil {
		t.Fatal(err)
	}
	g, err := gateway.New(gateway.Options{Key: strings.Repeat("k", 40), Store: st, Auth: auth.New(st, filepath.Join(dir, "admin.key"), nil), Shared: shared})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	return &replica{st: st, admin: secret, url: srv.URL}
}

func (r *replica) do(t *testing.T, method, path, key, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, r.url+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	_, _ = io.Copy(&b, resp.Body)
	return resp.StatusCode, b.String()
}

// until waits for cond (the other replica's copy follows a watch event).
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within a minute", what)
		}
	}
}

// Two gateway replicas share tenants and keys through the cluster: a
// tenant and key made on one work on the other, a quota changed on one
// shows on the other, a key revoked on one is refused by both; each
// keeps its own admin key; what a replica's store held before, and the
// cluster lacks, is gone at start.
func TestTenantsShared(t *testing.T) {
	e := start(t)
	e.Apply(t, filepath.Join(e.Deploy, "namespace.yaml"), false)
	e.Apply(t, filepath.Join(e.Deploy, "rbac.yaml"), false)
	a := newReplica(t, e, nil)
	var staleKey string
	b := newReplica(t, e, func(st *store.Store) { // made before the cluster held the tenants
		ctx := context.Background()
		if err := st.CreateTenant(ctx, &store.TenantRecord{Name: "stale"}); err != nil {
			t.Fatal(err)
		}
		staleKey, _, _ = auth.CreateKey(ctx, st, "stale", "old", false)
	})
	if code, _ := b.do(t, "GET", "/v1/sandboxes", staleKey, ""); code != 401 {
		t.Errorf("a key only in B's store before the sync: %d, want 401", code)
	}
	if code, _ := b.do(t, "GET", "/v1/tenants/stale", b.admin, ""); code != 404 {
		t.Errorf("a tenant only in B's store before the sync: %d, want 404", code)
	}

	if code, body := a.do(t, "POST", "/v1/tenants", a.admin, `{"name":"acme_1","quotas":{"sandboxes":3}}`); code != 201 {
		t.Fatalf("create tenant on A: %d %s", code, body)
	}
	code, body := a.do(t, "POST", "/v1/keys", a.admin, `{"tenant":"acme_1","name":"ci"}`)
	if code != 201 {
		t.Fatalf("create key on A: %d %s", code, body)
	}
	var key api.Key
	_ = json.Unmarshal([]byte(body), &key)
	until(t, "A's key accepted by B", func() bool { c, _ := b.do(t, "GET", "/v1/sandboxes", key.Secret, ""); return c == 200 })
	if c, _ := a.do(t, "GET", "/v1/sandboxes", key.Secret, ""); c != 200 {
		t.Errorf("the key on A: %d", c)
	}
	// Only its hash is in the cluster.
	obj, err := e.Dyn.Resource(kube.KeyGVR).Namespace(kubetest.Namespace).Get(context.Background(), strings.ReplaceAll(key.ID, "_", "."), metav1.GetOptions{})
	if err != nil || strings.Contains(mustJSON(obj.Object), key.Secret) {
		t.Fatalf("the key's object: %v (it must hold the hash, not the key)", err)
	}
	if code, body := b.do(t, "PATCH", "/v1/tenants/acme_1", b.admin, `{"quotas":{"sandboxes":5}}`); code != 200 {
		t.Fatalf("quota change on B: %d %s", code, body)
	}
	until(t, "B's quota on A", func() bool {
		_, body := a.do(t, "GET", "/v1/tenants/acme_1", a.admin, "")
		var tn api.Tenant
		return json.Unmarshal([]byte(body), &tn) == nil && tn.Quotas.Sandboxes == 5
	})
	// Each replica's admin key is its own.
	if c, _ := b.do(t, "GET", "/v1/tenants", a.admin, ""); c != 401 {
		t.Errorf("A's admin key on B: %d, want 401", c)
	}
	if code, body := b.do(t, "DELETE", "/v1/keys/"+key.ID, b.admin, ""); code/100 != 2 {
		t.Fatalf("revoke on B: %d %s", code, body)
	}
	until(t, "the key revoked on A", func() bool { c, _ := a.do(t, "GET", "/v1/sandboxes", key.Secret, ""); return c == 401 })
	// A tenant deleted in the cluster (kubectl delete) leaves both.
	if err := e.Dyn.Resource(kube.TenantGVR).Namespace(kubetest.Namespace).Delete(context.Background(), "acme.1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*replica{a, b} {
		until(t, "the tenant gone", func() bool { c, _ := r.do(t, "GET", "/v1/tenants/acme_1", r.admin, ""); return c == 404 })
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
