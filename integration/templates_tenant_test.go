package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage/ocitest"
)

// A tenant's uploaded templates count against its disk_mb quota: an
// upload past it is refused with 429 and leaves no template, whether the
// quota is spent before the upload starts or the image's files pass what
// it leaves while they are written.
func TestTenantTemplateQuota(t *testing.T) {
	ctx := context.Background()
	name, c, _ := tenantKey(t, "tplquota", &api.Quotas{DiskMB: 1})
	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := ocitest.WriteDockerArchive(archive, busyboxImage(t)); err != nil { // ~2 MB of files
		t.Fatal(err)
	}
	upload := func(tpl string) (*api.Template, error) {
		f, err := os.Open(archive)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		return c.UploadTemplate(ctx, api.ImportTemplateRequest{Name: tpl}, f)
	}
	setDisk := func(mb int64) {
		if _, err := env.client.UpdateTenant(ctx, name, api.UpdateTenantRequest{Quotas: &api.QuotasPatch{DiskMB: &mb}}); err != nil {
			t.Fatal(err)
		}
	}
	gone := func(tpl string) {
		t.Helper()
		if _, err := env.client.GetTemplate(ctx, tpl); !errors.Is(err, errdefs.ErrNotFound) {
			t.Errorf("a refused upload left template %s: %v", tpl, err)
		}
	}

	// 1 MiB: the files pass the quota while they are written.
	first := "tq-a-" + randHex(3)
	if _, err := upload(first); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "disk_mb quota") {
		t.Fatalf("upload past a 1 MiB quota = %v, want resource_exhausted naming the quota", err)
	}
	gone(first)

	// 64 MiB: it fits, and holds ~2 MB of the quota.
	setDisk(64)
	tpl, err := upload(first)
	if err != nil {
		t.Fatalf("upload within the quota: %v", err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), first) })
	if tpl.Tenant != name {
		t.Errorf("template tenant = %q, want %q", tpl.Tenant, name)
	}

	// 2 MiB: the first template leaves too little for a second.
	setDisk(2)
	second := "tq-b-" + randHex(3)
	if _, err := upload(second); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Errorf("second upload with 2 MiB of quota = %v, want resource_exhausted", err)
	}
	gone(second)

	// 1 MiB: spent before the upload starts, said at once.
	setDisk(1)
	if _, err := upload(second); !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "templates hold") {
		t.Errorf("upload with the quota spent = %v, want resource_exhausted saying what holds it", err)
	}
	gone(second)
	t.Logf("template of %d bytes: refused at 1 MiB, accepted at 64 MiB; a second refused at 2 MiB and 1 MiB", tpl.SizeBytes)
}

// Two concurrent uploads by one tenant cannot both use what its quota
// leaves: with room for one, exactly one is made.
func TestTenantTemplateQuotaConcurrent(t *testing.T) {
	ctx := context.Background()
	_, c, _ := tenantKey(t, "tplrace", &api.Quotas{DiskMB: 3}) // room for one ~2 MB image
	archive := filepath.Join(t.TempDir(), "img.tar")
	if err := ocitest.WriteDockerArchive(archive, busyboxImage(t)); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		name := fmt.Sprintf("tq-race-%d-%s", i, randHex(3))
		t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })
		wg.Add(1)
		go func() {
			defer wg.Done()
			f, err := os.Open(archive)
			if err != nil {
				errs[i] = err
				return
			}
			defer f.Close()
			_, errs[i] = c.UploadTemplate(ctx, api.ImportTemplateRequest{Name: name}, f)
		}()
	}
	wg.Wait()
	made, refused := 0, 0
	for _, err := range errs {
		switch {
		case err == nil:
			made++
		case errors.Is(err, errdefs.ErrResourceExhausted):
			refused++
		default:
			t.Errorf("concurrent upload: %v", err)
		}
	}
	if made != 1 || refused != 1 {
		t.Errorf("two concurrent uploads with room for one: %d made, %d refused (%v)", made, refused, errs)
	}
}
