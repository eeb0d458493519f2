package integration

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/posture"
)

// Quotas are enforced at create and fork with 429 and a message naming the
// quota and the current use; raising the quota lets the request through.
func TestQuotas(t *testing.T) {
	ctx := context.Background()
	name, c, _ := tenantKey(t, "quota", &api.Quotas{Sandboxes: 1, MemoryMB: 1024})
	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 256})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 256})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "sandboxes quota is 1, 1 in use") {
		t.Fatalf("second create = %v, want resource_exhausted naming the sandboxes quota and its use", err)
	}
	if _, err := c.ForkSandbox(ctx, sb.ID, 1); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("fork over quota = %v, want resource_exhausted", err)
	}
	three := int64(3)
	if _, err := env.client.UpdateTenant(ctx, name, api.UpdateTenantRequest{Quotas: &api.QuotasPatch{Sandboxes: &three}}); err != nil {
		t.Fatal(err)
	}
	// Memory is now the binding quota: 256 in use, 1024 allowed.
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 1024}); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "memory_mb quota") {
		t.Errorf("create over the memory quota = %v", err)
	}
	// Concurrent creates cannot both take the last slots: 2 slots left.
	var wg sync.WaitGroup
	var mu sync.Mutex
	okN, refused := 0, 0
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 128})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				okN++
			case errors.Is(err, errdefs.ErrResourceExhausted):
				refused++
			default:
				t.Errorf("concurrent create: %v", err)
			}
		}()
	}
	wg.Wait()
	if okN != 2 || refused != 2 {
		t.Errorf("4 concurrent creates with 2 slots left: %d created, %d refused", okN, refused)
	}
	tn, err := env.client.GetTenant(ctx, name)
	if err != nil || tn.Usage.Sandboxes != 3 || tn.Usage.MemoryMB != 512 {
		t.Errorf("tenant usage = %+v, %v; want 3 sandboxes, 512 MB", tn, err)
	}
	if err := env.client.DeleteTenant(ctx, name); !errors.Is(err, errdefs.ErrFailedPrecondition) {
		t.Errorf("deleting a tenant with sandboxes = %v, want failed_precondition", err)
	}
}

// TestQuotaPids: a tenant's pids quota caps the sum of its sandboxes'
// pids limits (issue 27: sandboxes at the allowed pids could together
// take every host pid); the CLI sets it and `tenant ls` shows its use.
func TestQuotaPids(t *testing.T) {
	ctx := context.Background()
	name, c, _ := tenantKey(t, "pids", nil)
	if _, e, code := cli(t, "", "tenant", "set", name, "--pids", "200"); code != 0 {
		t.Fatalf("tenant set --pids: %s", e)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Pids: 128}); err != nil {
		t.Fatal(err)
	}
	_, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Pids: 128})
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "pids quota is 200, 128 in use, this request adds 128") {
		t.Fatalf("create over the pids quota = %v, want resource_exhausted naming the pids quota", err)
	}
	if _, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Pids: 64}); err != nil {
		t.Fatalf("create within the pids quota: %v", err)
	}
	out, e, code := cli(t, "", "tenant", "ls")
	if code != 0 || !strings.Contains(out, "PIDS") || !strings.Contains(out, "192/200") {
		t.Fatalf("tenant ls shows no pids use 192/200: %s %s", out, e)
	}
}

// A tenant key past its burst gets 429; the admin key is not limited.
func TestRateLimit(t *testing.T) {
	_, _, k := tenantKey(t, "rate", nil)
	hc := apiRawClient()
	var wg sync.WaitGroup
	var mu sync.Mutex
	counts := map[int]int{}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 75; i++ {
				code, _ := rawDo(t, hc, "GET", "/v1/health", k.Secret, nil)
				mu.Lock()
				counts[code]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if counts[429] == 0 || counts[200] < 200 {
		t.Errorf("600 fast requests: %v; want at least the burst (200) answered and some 429", counts)
	}
	if code, body := rawDo(t, hc, "GET", "/v1/health", env.key, nil); code != 200 {
		t.Errorf("admin key after the burst: %d %s", code, body)
	}
	t.Logf("600 requests from 8 workers: %v", counts)
}

// The posture route and the posture package agree, and pass.
func TestSecurityRoute(t *testing.T) {
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	mustSh(t, id, "sleep 30 >/dev/null 2>&1 &")
	rep, err := env.client.SandboxSecurity(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Pass || len(rep.Processes) < 2 {
		t.Fatalf("posture report = %+v", rep)
	}
	local := posture.Check(id, sandboxPid(t, id), posture.Options{CgroupParent: env.cfg.CgroupParent, UIDBase: sandboxUIDBase(t, id), UIDCount: env.cfg.UIDCount})
	if !local.Pass {
		t.Errorf("posture.Check failed: %+v", local)
	}
	out, errOut, code := cli(t, "", "inspect", "--security", id)
	if code != 0 || !strings.Contains(out, ": pass") {
		t.Errorf("agentbox inspect --security = %d %q %q", code, out, errOut)
	}
}
