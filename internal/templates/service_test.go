package templates

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/build"
	"github.com/agentbox/agentbox/internal/build/builder"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// newTestService returns a service over a real pool (a btrfs loop file,
// unmounted at the end) and a real store, both in temp dirs, with no
// sandbox service: the calls tested here are refused or answered before
// one is needed.
func newTestService(t *testing.T) (*Service, *storage.Pool) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("needs root: the storage pool mounts a btrfs loop file (run the tests as root, as make test does)")
	}
	dir := t.TempDir()
	if err := os.Chmod(filepath.Dir(dir), 0o711); err != nil {
		t.Fatal(err)
	}
	pool, err := storage.Open(context.Background(), storage.Options{DataDir: dir, SizeGB: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// mount(8) attached the loop device with autoclear.
		if out, err := exec.Command("umount", filepath.Join(dir, "storage")).CombinedOutput(); err != nil {
			t.Errorf("umount: %v: %s", err, out)
		}
	})
	st, err := store.Open(context.Background(), filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return New(pool, st, nil, nil), pool
}

// Tenancy fails closed: every method of the template service refuses a
// context that says nobody's name, and changes nothing.
func TestNoPrincipalRefused(t *testing.T) {
	s, pool := newTestService(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := tenancy.Admin(context.Background())
	if _, err := s.ImportHost(admin, api.ImportTemplateRequest{Name: "pub", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	none := context.Background()
	for name, call := range map[string]func() error{
		"List":      func() error { _, err := s.List(none); return err },
		"Get":       func() error { _, err := s.Get(none, "pub"); return err },
		"CheckName": func() error { return s.CheckName(none, "new") },
		"ImportHost": func() error {
			_, err := s.ImportHost(none, api.ImportTemplateRequest{Name: "new", Rootfs: src})
			return err
		},
		"Upload": func() error {
			_, err := s.Upload(none, api.ImportTemplateRequest{Name: "new"}, strings.NewReader("not read"))
			return err
		},
		"Build": func() error {
			_, err := s.Build(none, &builder.Request{Name: "new", Spec: &build.Spec{From: "pub"}}, func() { t.Error("Build without a principal got as far as running") })
			return err
		},
		"Remove":  func() error { return s.Remove(none, "pub") },
		"OwnedBy": func() error { _, err := s.OwnedBy(none, "a"); return err },
	} {
		if err := call(); !errors.Is(err, tenancy.ErrNoPrincipal) || !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s without a principal = %v, want %v", name, err, tenancy.ErrNoPrincipal)
		}
	}
	if all, err := pool.ListTemplates(); err != nil || len(all) != 1 || all[0].Name != "pub" {
		t.Errorf("templates after the refused calls = %v, %v; want pub alone", all, err)
	}
}

// The rules a tenant meets, in the service: it sees public templates and
// its own, not another tenant's; it cannot import from the host, take a
// public or another tenant's name, remove a public template, or list a
// tenant's templates.
func TestTenantRules(t *testing.T) {
	s, _ := newTestService(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := tenancy.Admin(context.Background())
	a := tenancy.With(context.Background(), tenancy.Principal{Tenant: "a"})
	b := tenancy.With(context.Background(), tenancy.Principal{Tenant: "b"})
	if _, err := s.ImportHost(admin, api.ImportTemplateRequest{Name: "pub", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	// A template of a's (the service's tenant import is an upload, which
	// needs an image; the pool's host import makes one as well).
	if _, err := s.pool.ImportTemplate(a, api.ImportTemplateRequest{Name: "mine", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ImportHost(a, api.ImportTemplateRequest{Name: "x", Rootfs: src}); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("tenant ImportHost = %v, want permission denied", err)
	}
	if got, err := s.Get(a, "mine"); err != nil || got.Tenant != "a" {
		t.Errorf("owner Get = %+v, %v", got, err)
	}
	if _, err := s.Get(b, "mine"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("other tenant Get = %v, want not found", err)
	}
	for ctx, want := range map[context.Context][]string{admin: {"mine", "pub"}, a: {"mine", "pub"}, b: {"pub"}} {
		ts, err := s.List(ctx)
		var got []string
		for _, t := range ts {
			got = append(got, t.Name)
		}
		if err != nil || strings.Join(got, ",") != strings.Join(want, ",") {
			p, _ := tenancy.From(ctx)
			t.Errorf("List for %+v = %v, %v; want %v", p, got, err, want)
		}
	}
	for _, name := range []string{"pub", "mine"} {
		if err := s.CheckName(b, name); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("b CheckName(%s) = %v, want already exists", name, err)
		}
	}
	if err := s.CheckName(b, "Bad Name"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CheckName of a bad name = %v, want invalid argument", err)
	}
	if err := s.Remove(a, "pub"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("tenant removing a public template = %v, want permission denied", err)
	}
	if err := s.Remove(b, "mine"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("tenant removing another's template = %v, want not found", err)
	}
	if _, err := s.OwnedBy(a, "a"); !errors.Is(err, errdefs.ErrPermissionDenied) {
		t.Errorf("tenant OwnedBy = %v, want permission denied", err)
	}
	if got, err := s.OwnedBy(admin, "a"); err != nil || strings.Join(got, ",") != "mine" {
		t.Errorf("admin OwnedBy(a) = %v, %v; want mine", got, err)
	}
}
