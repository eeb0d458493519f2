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
	"time"

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

// A tenant builds its own template: it belongs to the tenant, the tenant
// creates sandboxes from it, and another tenant neither sees it, nor
// builds from it or under its name. The build stays within the tenant's
// disk quota: a step whose layer passes what the quota leaves ends the
// build with resource_exhausted, and no template is made.
func TestTenantTemplateBuild(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	nameA, ca, _ := tenantKey(t, "tbuild-a", nil)
	_, cb, _ := tenantKey(t, "tbuild-b", nil)
	tpl := "tb-" + randHex(3)
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), tpl) }) // before the tenant's own cleanup
	spec := "from: busybox\nsteps:\n  - run: echo tenant-built > /built\n"
	got, err := ca.BuildTemplate(ctx, tpl, []byte(spec), nil, nil)
	if err != nil {
		t.Fatalf("tenant build: %v", err)
	}
	if got.Tenant != nameA || got.Version != "1" || got.From != "busybox@1" || len(got.Layers) != 1 {
		t.Errorf("tenant's built template = %+v, want version 1 of %s on busybox@1 with one layer", got, nameA)
	}
	sb, err := ca.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl})
	if err != nil {
		t.Fatalf("the owner creating from its built template: %v", err)
	}
	out, err := ca.Exec(ctx, sb.ID, api.ExecRequest{Shell: "cat /built"})
	if err != nil || strings.TrimSpace(out.Stdout) != "tenant-built" {
		t.Errorf("sandbox from the built template: %+v, %v", out, err)
	}
	if err := ca.DestroySandbox(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}

	// Another tenant: not found, not listed, not a base, not its name.
	if _, err := cb.GetTemplate(ctx, tpl); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant's GET of the built template = %v, want not found", err)
	}
	list, err := cb.ListTemplates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range list {
		if x.Name == tpl {
			t.Errorf("another tenant's template list shows %s", tpl)
		}
	}
	if _, err := cb.CreateSandbox(ctx, api.CreateSandboxRequest{Template: tpl}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant creating from the built template = %v, want not found", err)
	}
	other := "tb-other-" + randHex(3)
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), other) })
	if _, err := cb.BuildTemplate(ctx, other, []byte("from: "+tpl+"\nsteps:\n  - run: cat /built\n"), nil, nil); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("another tenant building from the template = %v, want not found", err)
	}
	if _, err := cb.BuildTemplate(ctx, tpl, []byte(spec), nil, nil); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("another tenant building under the name = %v, want already_exists", err)
	}
	if x, err := ca.GetTemplate(ctx, tpl); err != nil || x.Version != "1" || x.Tenant != nameA {
		t.Errorf("the owner's template after the attempts = %+v, %v", x, err)
	}

	// The quota: 4 MiB leaves too little for an 8 MiB layer.
	mb := int64(4)
	if _, err := env.client.UpdateTenant(ctx, nameA, api.UpdateTenantRequest{Quotas: &api.QuotasPatch{DiskMB: &mb}}); err != nil {
		t.Fatal(err)
	}
	big := "tb-big-" + randHex(3)
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), big) })
	_, err = ca.BuildTemplate(ctx, big, []byte("from: "+tpl+"\nsteps:\n  - run: dd if=/dev/zero of=/big bs=1M count=8\n"), nil, nil)
	if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "disk_mb quota") {
		t.Errorf("a build past the quota = %v, want resource_exhausted naming the quota", err)
	}
	if _, err := env.client.GetTemplate(ctx, big); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("a build refused for the quota left template %s: %v", big, err)
	}
	// Within it, from its own template.
	small := "tb-small-" + randHex(3)
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), small) })
	if x, err := ca.BuildTemplate(ctx, small, []byte("from: "+tpl+"\nsteps:\n  - run: echo more > /more\n"), nil, nil); err != nil || x.Tenant != nameA {
		t.Errorf("a small build within the quota = %+v, %v", x, err)
	}
	t.Logf("tenant build of %s: owned by %s, hidden from another tenant; 8 MiB step refused at a 4 MiB quota", tpl, nameA)
}
