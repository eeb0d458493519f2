package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// BenchmarkCreateAndUpdate is what a sandbox create costs the store: one
// insert, then one update when the driver returns its handle.
func BenchmarkCreateAndUpdate(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rec := sampleRecord(fmt.Sprintf("sb%d", i))
		if err := s.CreateSandbox(ctx, rec); err != nil {
			b.Fatal(err)
		}
		err := s.UpdateSandbox(ctx, rec.ID, func(r *SandboxRecord) error {
			r.State = api.StateRunning
			r.Handle = &driver.Handle{ID: r.ID, Pid: 1234, PidStart: 5678, Socket: "/run/agentbox/x/guest.sock"}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkGetSandbox(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	if err := s.CreateSandbox(ctx, sampleRecord("g")); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.GetSandbox(ctx, "g"); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeyByHash(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	for i := 0; i < 100; i++ {
		k := &KeyRecord{ID: fmt.Sprintf("key_%012d", i), Tenant: "t", Hash: []byte(fmt.Sprintf("%032d", i))}
		if err := s.CreateKey(ctx, k); err != nil {
			b.Fatal(err)
		}
	}
	h := []byte(fmt.Sprintf("%032d", 42))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.KeyByHash(ctx, h); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkExpired(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	future := time.Now().Add(time.Hour)
	for i := 0; i < 1000; i++ {
		rec := &SandboxRecord{ID: fmt.Sprintf("sb%d", i), Tenant: "t", State: api.StateRunning, ExpiresAt: &future}
		if err := s.CreateSandbox(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Expired(ctx, time.Now()); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAppendAudit is what the audit entry of one state-changing
// call (every exec) costs; it is written before the caller has the answer.
func BenchmarkAppendAudit(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	rec := AuditRecord{Time: time.Now(), KeyID: "key_000000000001", Tenant: "t", Method: "POST",
		Path: "/v1/sandboxes/abcdefghijkl/exec", SandboxID: "abcdefghijkl", Status: 200, Remote: "127.0.0.1:40000"}
	for b.Loop() {
		if err := s.AppendAudit(ctx, []AuditRecord{rec}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListSandboxes: the whole list of 2,000 sandboxes against one
// page of 100 from its middle (issue 22: a page costs its own rows).
func BenchmarkListSandboxes(b *testing.B) {
	ctx := context.Background()
	s := openTest(b)
	base := time.Now().Add(-time.Hour)
	for i := range 2000 {
		rec := sampleRecord(fmt.Sprintf("sb%05d", i))
		rec.CreatedAt = base.Add(time.Duration(i) * time.Millisecond)
		if err := s.CreateSandbox(ctx, rec); err != nil {
			b.Fatal(err)
		}
	}
	mid := &Position{CreatedAt: base.Add(1000 * time.Millisecond), ID: "sb01000"}
	for _, bc := range []struct {
		name string
		f    Filter
		want int
	}{
		{"all-2000", Filter{Scope: tenancy.AllTenants()}, 2000},
		{"page-100-of-2000", Filter{Scope: tenancy.AllTenants(), After: mid, Limit: 100}, 100},
		{"tenant-page-100-of-2000", Filter{Scope: tenancy.Only(sampleRecord("x").Tenant), After: mid, Limit: 100}, 100},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				recs, err := s.ListSandboxes(ctx, bc.f)
				if err != nil || len(recs) != bc.want {
					b.Fatalf("%d records, %v; want %d", len(recs), err, bc.want)
				}
			}
		})
	}
}
