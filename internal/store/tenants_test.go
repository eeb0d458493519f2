package store

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

func TestTenants(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	if _, err := s.GetTenant(ctx, "default"); err != nil {
		t.Fatalf("the default tenant is missing after migration: %v", err)
	}
	q := Quotas{Sandboxes: 2, CPU: 1.5, MemoryMB: 1024, DiskMB: 4096}
	if err := s.CreateTenant(ctx, &TenantRecord{Name: "acme", Quotas: q}); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateTenant(ctx, &TenantRecord{Name: "acme"}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("duplicate tenant = %v, want ErrAlreadyExists", err)
	}
	got, err := s.GetTenant(ctx, "acme")
	if err != nil || got.Quotas != q {
		t.Fatalf("GetTenant = %+v, %v; want quotas %+v", got, err, q)
	}
	q.Sandboxes = 5
	if err := s.SetQuotas(ctx, "acme", q); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.GetTenant(ctx, "acme"); got.Quotas.Sandboxes != 5 {
		t.Errorf("quotas after SetQuotas = %+v", got.Quotas)
	}
	if err := s.SetQuotas(ctx, "nobody", q); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("SetQuotas of a missing tenant = %v", err)
	}

	// Usage: live sandboxes count fully, stopped ones only for disk.
	res := api.Resources{CPU: 0.5, MemoryMB: 256, DiskMB: 1000}
	for i, st := range []string{api.StateRunning, api.StatePaused, api.StateStopped, api.StateDestroyed, api.StateFailed} {
		rec := &SandboxRecord{ID: "sb" + st, Tenant: "acme", State: st, Resources: res, CreatedAt: time.Now().Add(time.Duration(i))}
		if err := s.CreateSandbox(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	u, err := s.TenantUsage(ctx, "acme")
	want := Usage{Sandboxes: 2, CPU: 1, MemoryMB: 512, DiskMB: 3000}
	if err != nil || u != want {
		t.Errorf("TenantUsage = %+v, %v; want %+v", u, err, want)
	}
	if u, _ := s.TenantUsage(ctx, "other"); u != (Usage{}) {
		t.Errorf("usage of a tenant without sandboxes = %+v", u)
	}

	// Delete is refused while sandboxes remain, and revokes keys.
	if err := s.CreateKey(ctx, &KeyRecord{ID: "key_acmeacmeacme", Tenant: "acme", Hash: []byte("h")}); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteTenant(ctx, "acme"); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("DeleteTenant with sandboxes = %v, want ErrFailedPrecondition", err)
	}
	for _, st := range []string{api.StateRunning, api.StatePaused, api.StateStopped} {
		s.UpdateSandbox(ctx, "sb"+st, func(r *SandboxRecord) error { r.State = api.StateDestroyed; return nil })
	}
	if err := s.DeleteTenant(ctx, "acme"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetTenant(ctx, "acme"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("GetTenant after DeleteTenant = %v, want ErrNotFound", err)
	}
	if _, err := s.KeyByHash(ctx, []byte("h")); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("key of a deleted tenant still valid: %v", err)
	}
	if err := s.DeleteTenant(ctx, "acme"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("second DeleteTenant = %v", err)
	}
}

func TestAudit(t *testing.T) {
	ctx := context.Background()
	s := openTest(t)
	now := time.Now()
	recs := []AuditRecord{
		{Time: now, KeyID: "key_a", Tenant: "a", Method: "POST", Path: "/v1/sandboxes", Status: 201},
		{Time: now, KeyID: "key_b", Tenant: "b", Method: "DELETE", Path: "/v1/sandboxes/x", SandboxID: "x", Status: 404},
		{Time: now, Method: "POST", Path: "/v1/sandboxes", Status: 401, Remote: "127.0.0.1:1"},
	}
	if err := s.AppendAudit(ctx, recs); err != nil {
		t.Fatal(err)
	}
	all, err := s.ListAudit(ctx, tenancy.AllTenants(), 10)
	if err != nil || len(all) != 3 || all[0].Status != 401 || all[1].SandboxID != "x" {
		t.Fatalf("ListAudit = %+v, %v", all, err)
	}
	if b, _ := s.ListAudit(ctx, tenancy.Only("b"), 10); len(b) != 1 || b[0].KeyID != "key_b" {
		t.Errorf("ListAudit(b) = %+v", b)
	}
	if one, _ := s.ListAudit(ctx, tenancy.AllTenants(), 1); len(one) != 1 || one[0].ID != all[0].ID {
		t.Errorf("limit 1 = %+v", one)
	}
	// One record (every API call's) takes the path without a transaction.
	single := AuditRecord{Time: now, KeyID: "key_c", Tenant: "c", Method: "POST", Path: "/v1/sandboxes/y/exec", SandboxID: "y", Status: 200}
	if err := s.AppendAudit(ctx, []AuditRecord{single}); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.ListAudit(ctx, tenancy.Only("c"), 10); len(c) != 1 || c[0].ID <= all[0].ID || c[0].Path != single.Path || c[0].Status != 200 {
		t.Errorf("ListAudit(c) after a single append = %+v", c)
	}
}
