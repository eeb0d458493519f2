package storage

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// Templates are tenant-scoped: a tenant's template is seen only by it and
// the admin, keeps its owner on every version, and no tenant can add a
// version under a public name or another tenant's.
func TestTemplateOwners(t *testing.T) {
	p, _ := newTestPool(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "hello"), []byte("hi\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	admin := tenancy.Admin(context.Background())
	a := tenancy.With(admin, tenancy.Principal{Tenant: "a"})
	b := tenancy.With(admin, tenancy.Principal{Tenant: "b"})
	imp := func(ctx context.Context, name string) (*Template, error) {
		return p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Rootfs: src})
	}
	pub, err := imp(admin, "pub")
	if err != nil || pub.Tenant != "" {
		t.Fatalf("admin import = %+v, %v; want a public template", pub, err)
	}
	mine, err := imp(a, "mine")
	if err != nil || mine.Tenant != "a" {
		t.Fatalf("tenant import = %+v, %v; want one owned by a", mine, err)
	}
	if got, err := p.TemplateFor(a, "mine"); err != nil || got.Tenant != "a" || got.API().Tenant != "a" {
		t.Errorf("owner's TemplateFor = %+v, %v", got, err)
	}
	if _, err := p.TemplateFor(admin, "mine"); err != nil {
		t.Errorf("admin's TemplateFor of a tenant's template: %v", err)
	}
	_, errOther := p.TemplateFor(b, "mine")
	_, errNone := p.TemplateFor(b, "nosuch")
	if !errors.Is(errOther, errdefs.ErrNotFound) || errOther.Error() != strings.ReplaceAll(errNone.Error(), "nosuch", "mine") {
		t.Errorf("another tenant's TemplateFor = %v; want the not-found of a missing name (%v)", errOther, errNone)
	}
	if _, err := p.TemplateFor(b, "pub"); err != nil {
		t.Errorf("public template for a tenant: %v", err)
	}
	names := func(ctx context.Context) []string {
		ts, err := p.ListTemplatesFor(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, t := range ts {
			out = append(out, t.Name)
		}
		return out
	}
	if got := names(b); len(got) != 1 || got[0] != "pub" {
		t.Errorf("tenant b lists %v, want [pub]", got)
	}
	if got := names(a); len(got) != 2 {
		t.Errorf("tenant a lists %v, want [mine pub]", got)
	}
	if got := names(admin); len(got) != 2 {
		t.Errorf("admin lists %v, want both", got)
	}

	// Names: b cannot take a's or the public one, before or at publish.
	for _, name := range []string{"mine", "pub"} {
		if err := p.CheckNewVersion(b, name); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("CheckNewVersion(b, %s) = %v, want already exists", name, err)
		}
		if _, err := imp(b, name); !errors.Is(err, errdefs.ErrAlreadyExists) {
			t.Errorf("b importing %s = %v, want already exists", name, err)
		}
	}
	if vs, _ := p.TemplateVersions("mine"); len(vs) != 1 {
		t.Errorf("a's template has %d versions after b's attempts, want 1", len(vs))
	}
	// The owner adds versions; so does the admin, for the owner.
	if v2, err := imp(a, "mine"); err != nil || v2.Version != "2" || v2.Tenant != "a" {
		t.Errorf("owner's second version = %+v, %v", v2, err)
	}
	if v3, err := imp(admin, "mine"); err != nil || v3.Version != "3" || v3.Tenant != "a" {
		t.Errorf("admin's version of a's template = %+v, %v; want it owned by a", v3, err)
	}
	// The owner is kept on disk: a reopened pool sees it.
	if got, err := p.TemplateVersion("mine", "1"); err != nil || got.Tenant != "a" {
		t.Errorf("reloaded version 1 = %+v, %v", got, err)
	}
}

// A version of another tenant's template is not found, as the name is.
func TestTemplateVersionFor(t *testing.T) {
	p, _ := newTestPool(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	a := tenancy.With(context.Background(), tenancy.Principal{Tenant: "a"})
	b := tenancy.With(context.Background(), tenancy.Principal{Tenant: "b"})
	if _, err := p.ImportTemplate(a, api.ImportTemplateRequest{Name: "own", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	if got, err := p.TemplateVersionFor(a, "own", "1"); err != nil || got.Tenant != "a" {
		t.Errorf("owner: %+v, %v", got, err)
	}
	_, errV := p.TemplateVersionFor(b, "own", "1")
	_, errMissingV := p.TemplateVersionFor(b, "own", "2")
	_, errName := p.TemplateFor(b, "own")
	if !errors.Is(errV, errdefs.ErrNotFound) || errV.Error() != errName.Error() || errMissingV.Error() != errName.Error() {
		t.Errorf("another tenant: %v / %v, want %v for both", errV, errMissingV, errName)
	}
	if _, err := p.TemplateVersionFor(a, "own", "2"); !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "no version 2") {
		t.Errorf("owner, missing version: %v", err)
	}
}

// Tenancy fails closed: every entry point that takes a caller's template
// name, lists templates or makes a version refuses a context that carries
// no principal, and changes nothing. None acts as the admin by default.
func TestNoPrincipalRefused(t *testing.T) {
	p, _ := newTestPool(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ImportTemplate(tenancy.Admin(context.Background()), api.ImportTemplateRequest{Name: "pub", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	none := context.Background()
	for name, call := range map[string]func() error{
		"TemplateFor":        func() error { _, err := p.TemplateFor(none, "pub"); return err },
		"TemplateVersionFor": func() error { _, err := p.TemplateVersionFor(none, "pub", "1"); return err },
		"ListTemplatesFor":   func() error { _, err := p.ListTemplatesFor(none); return err },
		"CheckNewVersion":    func() error { return p.CheckNewVersion(none, "new") },
		"ImportTemplate": func() error {
			_, err := p.ImportTemplate(none, api.ImportTemplateRequest{Name: "new", Rootfs: src})
			return err
		},
		"ImportImage": func() error {
			_, err := p.ImportImage(none, api.ImportTemplateRequest{Name: "new", Image: filepath.Join(src, "f")})
			return err
		},
		"ImportImageReader": func() error {
			_, err := p.ImportImageReader(none, api.ImportTemplateRequest{Name: "new"}, strings.NewReader("not read"))
			return err
		},
		"ImportImageLayer": func() error {
			_, err := p.ImportImageLayer(none, filepath.Join(src, "f"), strings.Repeat("a", 32))
			return err
		},
		"SaveBuiltTemplate": func() error {
			_, _, err := p.SaveBuiltTemplate(none, "new", &Template{BuildInfo: BuildInfo{From: "pub@1"}})
			return err
		},
		"RemoveTemplateAll": func() error { return p.RemoveTemplateAll(none, "pub") },
	} {
		if err := call(); !errors.Is(err, tenancy.ErrNoPrincipal) || !errors.Is(err, errdefs.ErrPermissionDenied) {
			t.Errorf("%s without a principal = %v, want %v", name, err, tenancy.ErrNoPrincipal)
		}
	}
	all, err := p.ListTemplates()
	if err != nil || len(all) != 1 || all[0].Name != "pub" {
		t.Errorf("templates after the refused calls = %v, %v; want pub alone", all, err)
	}
}
