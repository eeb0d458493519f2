package storage

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// TestBuildLayers: committed build layers, a built template version that
// stacks them on its base (no copy), an unchanged save that makes no new
// version, GC of unreferenced layers (pins and in-use lowers respected),
// a base that cannot be removed under its dependents, and the temporary
// files an interrupted upload or build left, removed when the pool opens.
func TestBuildLayers(t *testing.T) {
	p, opts := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "bin", "x"), []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "base", Rootfs: root}); err != nil {
		t.Fatal(err)
	}
	commit := func(id string) {
		t.Helper()
		sid := "step" + id[:6]
		upper, _, err := p.CreateLayer(ctx, sid, 64, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(upper, id), []byte(id), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.CommitBuildLayer(ctx, sid, LayerMeta{ID: id, Step: "run: " + id}); err != nil {
			t.Fatal(err)
		}
		if err := p.RemoveLayer(ctx, sid); err != nil {
			t.Fatal(err)
		}
		if !p.HasBuildLayer(id) {
			t.Fatalf("layer %s is not there after its commit", id)
		}
	}
	a, b, c := strings.Repeat("a", 32), strings.Repeat("b", 32), strings.Repeat("c", 32)
	for _, id := range []string{a, b, c} {
		commit(id)
	}
	if m, err := p.BuildLayerInfo(a); err != nil || m.Step != "run: "+a {
		t.Errorf("layer.json: %+v %v", m, err)
	}

	built := &Template{Env: map[string]string{"K": "v"}}
	built.From, built.Layers = "base@1", []string{b, a}
	tpl, created, err := p.SaveBuiltTemplate(ctx, "built", built)
	if err != nil || !created || tpl.Version != "1" {
		t.Fatalf("save: %+v %v %v", tpl, created, err)
	}
	want := []string{p.BuildLayerUpper(b), p.BuildLayerUpper(a), filepath.Join(p.Root(), "templates", "base", "1", "rootfs")}
	if got := tpl.LowerDirs(); !reflect.DeepEqual(got, want) {
		t.Errorf("lowers %v, want %v", got, want)
	}
	again := &Template{Env: map[string]string{"K": "v"}}
	again.From, again.Layers = "base@1", []string{b, a}
	if tpl2, created, err := p.SaveBuiltTemplate(ctx, "built", again); err != nil || created || tpl2.Version != "1" {
		t.Errorf("unchanged save made version %s (created %v): %v", tpl2.Version, created, err)
	}
	if d := p.Describe(tpl); !reflect.DeepEqual(d.Versions, []string{"1"}) || d.From != "base@1" || len(d.Layers) != 2 {
		t.Errorf("describe: %+v", d)
	}

	add, release := p.PinBuildLayers()
	add(c)
	if removed, err := p.GCLayers(ctx, nil); err != nil || len(removed) != 0 {
		t.Errorf("GC removed %v (%v) with c pinned", removed, err)
	}
	release()
	if removed, _ := p.GCLayers(ctx, map[string]bool{p.BuildLayerUpper(c): true}); len(removed) != 0 {
		t.Errorf("GC removed %v while a sandbox stacks on c", removed)
	}
	if removed, _ := p.GCLayers(ctx, nil); !reflect.DeepEqual(removed, []string{c}) {
		t.Errorf("GC removed %v, want only c", removed)
	}

	err = p.RemoveTemplate(ctx, "base", "1")
	if !errors.Is(err, errdefs.ErrFailedPrecondition) || !strings.Contains(err.Error(), "built@1") {
		t.Errorf("removing the base of built@1: %v", err)
	}
	if err := p.RemoveTemplateAll(ctx, "built"); err != nil {
		t.Fatal(err)
	}
	if removed, _ := p.GCLayers(ctx, nil); len(removed) != 2 {
		t.Errorf("GC after rm removed %v, want a and b", removed)
	}
	if ids, _ := p.ListBuildLayers(); len(ids) != 0 {
		t.Errorf("layers left: %v", ids)
	}
	if err := p.RemoveTemplate(ctx, "base", "1"); err != nil {
		t.Errorf("removing base once nothing is built on it: %v", err)
	}

	for _, n := range []string{".tmp-build-1", ".tmp-upload-2"} {
		if err := os.WriteFile(filepath.Join(p.Root(), n), []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(p.Root(), ".tmp-image-3", "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, opts); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(p.Root())
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".tmp-") {
			t.Errorf("%s is left after Open", e.Name())
		}
	}
	// A layer's size is what its files hold on disk, whatever btrfs's
	// qgroup accounting says (a layer of 8 MiB counts 8 MiB at once).
	big := strings.Repeat("d", 32)
	{
		sid := "step" + big[:6]
		upper, _, err := p.CreateLayer(ctx, sid, 64, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(upper, "big"), bytes.Repeat([]byte{1}, 8<<20), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.CommitBuildLayer(ctx, sid, LayerMeta{ID: big, Step: "run: big"}); err != nil {
			t.Fatal(err)
		}
		_ = p.RemoveLayer(ctx, sid)
		if n := p.BuildLayerSize(big); n < 8<<20 || n > 9<<20 {
			t.Errorf("BuildLayerSize of a layer holding 8 MiB = %d", n)
		}
	}
}
