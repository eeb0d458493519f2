package kube

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/cache"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

// The resources of a fleet's tenants and API keys (deploy/crds).
var (
	TenantGVR = schema.GroupVersionResource{Group: "agentbox.dev", Version: "v1alpha1", Resource: "agentboxtenants"}
	KeyGVR    = schema.GroupVersionResource{Group: "agentbox.dev", Version: "v1alpha1", Resource: "agentboxapikeys"}
)

// objectName is the object name of a tenant name or key id: '_', which
// they may hold and Kubernetes names may not, becomes '.', which they
// never hold. The spec keeps the name as it is.
func objectName(s string) string { return strings.ReplaceAll(s, "_", ".") }

// Tenants keeps a gateway's store of tenants and API keys the same as the
// cluster's AgentboxTenant and AgentboxAPIKey objects, so that every
// gateway replica authenticates the same keys ([kubernetes] tenants):
// the cluster is the truth, the store its copy that authentication reads
// (a request never waits on the API server). The gateway's own admin key
// (admin.key) and its tenant stay local to it.
type Tenants struct {
	c       *Client
	st      *store.Store
	localID string // the id of the gateway's admin.key, never synced
	tenants cache.SharedIndexInformer
	keys    cache.SharedIndexInformer
	mu      sync.Mutex // one reconcile at a time
}

// SyncTenants starts the copy: it waits until the cluster's objects are
// read and the store made the same (tenants and keys the cluster lacks
// are removed and revoked in the store), then follows every change until
// ctx is done. localKeyID is the gateway's admin key, kept.
func (c *Client) SyncTenants(ctx context.Context, st *store.Store, localKeyID string) (*Tenants, error) {
	t := &Tenants{c: c, st: st, localID: localKeyID,
		tenants: informer(c.dyn.Resource(TenantGVR).Namespace(c.ns), ""),
		keys:    informer(c.dyn.Resource(KeyGVR).Namespace(c.ns), "")}
	var ready bool
	var first error
	err := c.follow(ctx, "AgentboxTenants and AgentboxAPIKeys", 0, func() {
		err := t.reconcile(ctx)
		switch {
		case !ready:
			first, ready = err, true
		case err != nil && ctx.Err() == nil:
			c.log.Warn("copying the cluster's tenants and keys", "err", err)
		}
	}, t.tenants, t.keys)
	if err == nil {
		err = first
	}
	if err != nil {
		return nil, err
	}
	return t, nil
}

// reconcile makes the store's tenants and keys the cluster's.
func (t *Tenants) reconcile(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	var errs []error
	want := map[string]store.Quotas{}
	for _, o := range t.tenants.GetStore().List() {
		if name, q, ok := tenantOf(o); ok {
			want[name] = q
		}
	}
	have, err := t.st.ListTenants(ctx)
	if err != nil {
		return err
	}
	for _, rec := range have {
		q, ok := want[rec.Name]
		switch {
		case rec.Name == localTenant:
		case !ok:
			if err := t.st.DeleteTenant(ctx, rec.Name); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
				errs = append(errs, err)
			}
		case q != rec.Quotas:
			errs = append(errs, t.st.SetQuotas(ctx, rec.Name, q))
		}
		delete(want, rec.Name)
	}
	for name, q := range want {
		if err := t.st.CreateTenant(ctx, &store.TenantRecord{Name: name, Quotas: q}); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			errs = append(errs, err)
		}
	}
	wantKeys := map[string]*store.KeyRecord{}
	for _, o := range t.keys.GetStore().List() {
		if k, ok := keyOf(o); ok {
			wantKeys[k.ID] = k
		}
	}
	keys, err := t.st.ListKeys(ctx, "")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID == t.localID {
			continue
		}
		if _, ok := wantKeys[k.ID]; !ok && k.RevokedAt == nil {
			errs = append(errs, t.st.RevokeKey(ctx, k.ID))
		}
		delete(wantKeys, k.ID)
	}
	for _, k := range wantKeys {
		if err := t.st.CreateKey(ctx, k); err != nil && !errors.Is(err, errdefs.ErrAlreadyExists) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// localTenant is the admin key's tenant (auth.AdminTenant), which every
// gateway has of its own.
const localTenant = "default"

func tenantOf(o any) (string, store.Quotas, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return "", store.Quotas{}, false
	}
	name, _, _ := unstructured.NestedString(u.Object, "spec", "name")
	if name == "" || objectName(name) != u.GetName() {
		return "", store.Quotas{}, false
	}
	var q store.Quotas
	q.Sandboxes, _, _ = unstructured.NestedInt64(u.Object, "spec", "quotas", "sandboxes")
	q.MemoryMB, _, _ = unstructured.NestedInt64(u.Object, "spec", "quotas", "memoryMB")
	q.DiskMB, _, _ = unstructured.NestedInt64(u.Object, "spec", "quotas", "diskMB")
	q.Pids, _, _ = unstructured.NestedInt64(u.Object, "spec", "quotas", "pids")
	if s, ok, _ := unstructured.NestedString(u.Object, "spec", "quotas", "cpu"); ok {
		q.CPU, _ = strconv.ParseFloat(s, 64)
	}
	return name, q, true
}

func keyOf(o any) (*store.KeyRecord, bool) {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return nil, false
	}
	k := &store.KeyRecord{}
	k.ID, _, _ = unstructured.NestedString(u.Object, "spec", "id")
	k.Tenant, _, _ = unstructured.NestedString(u.Object, "spec", "tenant")
	k.Name, _, _ = unstructured.NestedString(u.Object, "spec", "name")
	k.Admin, _, _ = unstructured.NestedBool(u.Object, "spec", "admin")
	h, _, _ := unstructured.NestedString(u.Object, "spec", "sha256")
	var err error
	if k.Hash, err = hex.DecodeString(h); err != nil || len(k.Hash) != 32 || k.ID == "" || k.Tenant == "" || objectName(k.ID) != u.GetName() {
		return nil, false
	}
	k.CreatedAt = u.GetCreationTimestamp().Time
	return k, true
}

// Hold keeps the copy from running until release is called: a gateway
// holds it across a write to its store and the same write to the
// cluster, so that a copy made in between does not take the store's new
// record, which the cluster lacks yet, for one to remove. The Put and
// Delete methods return once this gateway's watch has seen their write.
func (t *Tenants) Hold() (release func()) {
	t.mu.Lock()
	return t.mu.Unlock
}

// PutTenant writes the store's tenant name to the cluster.
func (t *Tenants) PutTenant(ctx context.Context, name string) error {
	rec, err := t.st.GetTenant(ctx, name)
	if err != nil {
		return err
	}
	q := rec.Quotas
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": TenantGVR.GroupVersion().String(), "kind": "AgentboxTenant",
		"metadata": map[string]any{"name": objectName(name), "namespace": t.c.ns},
		"spec": map[string]any{"name": name, "quotas": map[string]any{
			"sandboxes": q.Sandboxes, "cpu": strconv.FormatFloat(q.CPU, 'f', -1, 64), "memoryMB": q.MemoryMB, "diskMB": q.DiskMB, "pids": q.Pids}},
	}}
	if err := t.apply(ctx, TenantGVR, obj); err != nil {
		return err
	}
	return t.seen(ctx, t.tenants, obj.GetName(), func(o any) bool {
		n, got, ok := tenantOf(o)
		return ok && n == name && got == q
	})
}

// DeleteTenant removes tenant name and its keys from the cluster.
func (t *Tenants) DeleteTenant(ctx context.Context, name string) error {
	for _, o := range t.keys.GetStore().List() {
		if k, ok := keyOf(o); ok && k.Tenant == name {
			if err := t.del(ctx, t.keys, KeyGVR, objectName(k.ID)); err != nil {
				return err
			}
		}
	}
	return t.del(ctx, t.tenants, TenantGVR, objectName(name))
}

// PutKey writes the store's key id (its hash, never the secret) to the
// cluster.
func (t *Tenants) PutKey(ctx context.Context, id string) error {
	keys, err := t.st.ListKeys(ctx, "")
	if err != nil {
		return err
	}
	for _, k := range keys {
		if k.ID != id {
			continue
		}
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": KeyGVR.GroupVersion().String(), "kind": "AgentboxAPIKey",
			"metadata": map[string]any{"name": objectName(id), "namespace": t.c.ns},
			"spec": map[string]any{"id": id, "tenant": k.Tenant, "name": k.Name, "admin": k.Admin,
				"sha256": hex.EncodeToString(k.Hash)},
		}}
		if err := t.apply(ctx, KeyGVR, obj); err != nil {
			return err
		}
		return t.seen(ctx, t.keys, obj.GetName(), func(o any) bool { return o != nil })
	}
	return errdefs.NotFound("API key %s not found", id)
}

// RevokeKey removes key id from the cluster: every gateway revokes it.
func (t *Tenants) RevokeKey(ctx context.Context, id string) error {
	return t.del(ctx, t.keys, KeyGVR, objectName(id))
}

// seen waits until inf's copy of object name (nil when it has none)
// satisfies ok: this gateway's watch has brought its own write.
func (t *Tenants) seen(ctx context.Context, inf cache.SharedIndexInformer, name string, ok func(any) bool) error {
	for {
		o, exists, _ := inf.GetStore().GetByKey(t.c.ns + "/" + name)
		if !exists {
			o = nil
		}
		if ok(o) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubernetes: the watch did not bring back the write of %s: %w", name, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

func (t *Tenants) apply(ctx context.Context, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	body, err := obj.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	_, err = t.c.dyn.Resource(gvr).Namespace(t.c.ns).Patch(ctx, obj.GetName(), "application/apply-patch+yaml", body,
		metav1.PatchOptions{FieldManager: "agentbox-gateway", Force: &force})
	if err != nil {
		return t.c.explain("writing "+obj.GetKind()+" "+obj.GetName(), err)
	}
	return nil
}

func (t *Tenants) del(ctx context.Context, inf cache.SharedIndexInformer, gvr schema.GroupVersionResource, name string) error {
	err := t.c.dyn.Resource(gvr).Namespace(t.c.ns).Delete(ctx, name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		return t.c.explain("deleting "+gvr.Resource+" "+name, err)
	}
	return t.seen(ctx, inf, name, func(o any) bool { return o == nil })
}
