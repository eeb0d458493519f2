package storage

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
	"golang.org/x/sys/unix"
)

// makeTree builds a small root filesystem with one of each kind of entry.
func makeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "bin"), 0o755))
	must(os.MkdirAll(filepath.Join(dir, "home/user"), 0o750))
	must(os.Chown(filepath.Join(dir, "home/user"), 1000, 1000))
	must(os.Mkdir(filepath.Join(dir, "tmp"), 0o777))
	must(unix.Chmod(filepath.Join(dir, "tmp"), 0o1777))
	must(os.WriteFile(filepath.Join(dir, "bin/tool"), []byte("#!/bin/sh\necho hi\n"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "bin/su"), []byte("setuid"), 0o755))
	must(unix.Chmod(filepath.Join(dir, "bin/su"), 0o4755))
	must(os.Link(filepath.Join(dir, "bin/tool"), filepath.Join(dir, "bin/tool-link")))
	must(os.Symlink("tool", filepath.Join(dir, "bin/sym")))
	must(os.Symlink("/etc/shadow", filepath.Join(dir, "bin/abs-sym")))
	must(os.WriteFile(filepath.Join(dir, "home/user/notes"), []byte("hello"), 0o600))
	must(os.Chown(filepath.Join(dir, "home/user/notes"), 1000, 1001))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	big := make([]byte, 3<<20+17)
	for i := range big {
		big[i] = byte(i)
	}
	must(os.WriteFile(filepath.Join(dir, "bin/big"), big, 0o644))
	return dir
}

func TestImportTemplate(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	src := makeTree(t)
	req := api.ImportTemplateRequest{Name: "base", Rootfs: src, User: "user", Workdir: "/home/user", Env: map[string]string{"LANG": "C.UTF-8"}}
	tpl, err := p.ImportTemplate(ctx, req)
	if err != nil {
		t.Fatalf("ImportTemplate: %v", err)
	}
	if tpl.Version != "1" || tpl.User != "user" || tpl.Workdir != "/home/user" || tpl.Env["LANG"] != "C.UTF-8" || tpl.UIDBase != testUIDBase {
		t.Errorf("template = %+v", tpl)
	}
	if tpl.SizeBytes < 3<<20 {
		t.Errorf("SizeBytes = %d, want at least 3 MiB", tpl.SizeBytes)
	}
	r := tpl.Rootfs

	type want struct {
		path     string
		typ      uint32
		mode     uint32
		uid, gid uint32
	}
	b := uint32(testUIDBase)
	for _, w := range []want{
		{".", unix.S_IFDIR, 0o755, b, b},
		{"tmp", unix.S_IFDIR, 0o1777, b, b},
		{"home/user", unix.S_IFDIR, 0o750, b + 1000, b + 1000},
		{"home/user/notes", unix.S_IFREG, 0o600, b + 1000, b + 1001},
		{"bin/tool", unix.S_IFREG, 0o755, b, b},
		{"bin/su", unix.S_IFREG, 0o4755, b, b},
		{"bin/sym", unix.S_IFLNK, 0o777, b, b},
	} {
		t.Run(w.path, func(t *testing.T) {
			var st unix.Stat_t
			if err := unix.Lstat(filepath.Join(r, w.path), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&unix.S_IFMT != w.typ || st.Mode&0o7777 != w.mode || st.Uid != w.uid || st.Gid != w.gid {
				t.Errorf("got type %o mode %o owner %d:%d, want type %o mode %o owner %d:%d",
					st.Mode&unix.S_IFMT, st.Mode&0o7777, st.Uid, st.Gid, w.typ, w.mode, w.uid, w.gid)
			}
		})
	}
	if got, _ := os.Readlink(filepath.Join(r, "bin/abs-sym")); got != "/etc/shadow" {
		t.Errorf("absolute symlink target = %q, want it copied verbatim", got)
	}
	var a, l unix.Stat_t
	_ = unix.Lstat(filepath.Join(r, "bin/tool"), &a)
	_ = unix.Lstat(filepath.Join(r, "bin/tool-link"), &l)
	if a.Ino != l.Ino || a.Nlink != 2 {
		t.Errorf("hard link not kept: inodes %d and %d, nlink %d", a.Ino, l.Ino, a.Nlink)
	}
	if _, err := os.Lstat(filepath.Join(r, "fifo")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("fifo: %v, want skipped", err)
	}
	gotBig, _ := os.ReadFile(filepath.Join(r, "bin/big"))
	wantBig, _ := os.ReadFile(filepath.Join(src, "bin/big"))
	if string(gotBig) != string(wantBig) {
		t.Errorf("bin/big content differs (%d vs %d bytes)", len(gotBig), len(wantBig))
	}

	t.Run("xattrs", func(t *testing.T) {
		tool := filepath.Join(src, "bin/tool")
		if err := unix.Setxattr(tool, "user.agentbox", []byte("v"), 0); err != nil {
			t.Skipf("source filesystem refuses user xattrs: %v", err)
		}
		// struct vfs_cap_data, revision 2, CAP_NET_RAW (13) permitted.
		vcap := []byte{0, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		if err := unix.Setxattr(tool, "security.capability", vcap, 0); err != nil {
			t.Logf("cannot set security.capability on the source: %v", err)
		}
		t2, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "xattrs", Rootfs: src})
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(filepath.Join(t2.Rootfs, "bin/tool"), "user.agentbox", buf)
		if err != nil || string(buf[:n]) != "v" {
			t.Errorf("user.agentbox = %q, %v; want v", buf[:max(n, 0)], err)
		}
		if _, err := unix.Lgetxattr(filepath.Join(t2.Rootfs, "bin/tool"), "security.capability", buf); !errors.Is(err, unix.ENODATA) {
			t.Errorf("security.capability on the copy: %v, want ENODATA (dropped)", err)
		}
		if err := p.RemoveTemplate(ctx, "xattrs", t2.Version); err != nil {
			t.Fatal(err)
		}
	})

	// Read-only: neither root nor anyone can change a version.
	if err := os.WriteFile(filepath.Join(r, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("writing into the template: %v, want EROFS", err)
	}
	if ro, err := subvolReadOnly(filepath.Dir(r)); err != nil || !ro {
		t.Errorf("subvolume read-only = %v, %v", ro, err)
	}

	// A second import is version 2 and the newest; version 1 is unchanged.
	req.Env = map[string]string{"V": "2"}
	tpl2, err := p.ImportTemplate(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if tpl2.Version != "2" {
		t.Errorf("second import version = %q, want 2", tpl2.Version)
	}
	newest, err := p.Template("base")
	if err != nil || newest.Version != "2" || newest.Env["V"] != "2" || newest.Rootfs != tpl2.Rootfs {
		t.Errorf("Template(base) = %+v, %v; want version 2", newest, err)
	}
	v1, err := p.TemplateVersion("base", "1")
	if err != nil || v1.Version != "1" || v1.Env["LANG"] != "C.UTF-8" || !v1.CreatedAt.Equal(tpl.CreatedAt) {
		t.Errorf("TemplateVersion(base, 1) = %+v, %v", v1, err)
	}
	if vs, err := p.TemplateVersions("base"); err != nil || len(vs) != 2 {
		t.Errorf("TemplateVersions = %d, %v; want 2", len(vs), err)
	}
	if _, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "other", Rootfs: src}); err != nil {
		t.Fatal(err)
	}
	list, err := p.ListTemplates()
	if err != nil || len(list) != 2 || list[0].Name != "base" || list[0].Version != "2" || list[1].Name != "other" {
		t.Errorf("ListTemplates = %v, %v; want base v2 and other v1", list, err)
	}
	if got := list[0].API(); got.Name != "base" || got.Version != "2" {
		t.Errorf("API() = %+v", got)
	}

	// Remove a version.
	if err := p.RemoveTemplate(ctx, "other", "1"); err != nil {
		t.Fatalf("RemoveTemplate: %v", err)
	}
	if _, err := p.Template("other"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Template(other) after remove = %v, want not found", err)
	}

	// Nothing half-made is left of any import.
	ents, _ := os.ReadDir(filepath.Join(p.Root(), "templates", "base"))
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			t.Errorf("staging dir left: %s", e.Name())
		}
	}
}

func TestTemplateErrors(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())

	_, err := p.Template("nope")
	if !errors.Is(err, errdefs.ErrNotFound) || !strings.Contains(err.Error(), "scripts/build-template.sh nope") {
		t.Errorf("Template(nope) = %v, want not found naming the build script", err)
	}
	if _, err := p.TemplateVersion("nope", "1"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("TemplateVersion(nope, 1) = %v, want not found", err)
	}

	src := makeTree(t)
	bad := makeTree(t)
	if err := os.Chown(filepath.Join(bad, "bin/tool"), 70000, 0); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		req  api.ImportTemplateRequest
	}{
		{"uppercase name", api.ImportTemplateRequest{Name: "Base", Rootfs: src}},
		{"slash in name", api.ImportTemplateRequest{Name: "a/b", Rootfs: src}},
		{"dot name", api.ImportTemplateRequest{Name: "..", Rootfs: src}},
		{"long name", api.ImportTemplateRequest{Name: strings.Repeat("a", 64), Rootfs: src}},
		{"relative rootfs", api.ImportTemplateRequest{Name: "x", Rootfs: "rootfs"}},
		{"missing rootfs", api.ImportTemplateRequest{Name: "x", Rootfs: "/nonexistent/rootfs"}},
		{"relative workdir", api.ImportTemplateRequest{Name: "x", Rootfs: src, Workdir: "home"}},
		{"bad env", api.ImportTemplateRequest{Name: "x", Rootfs: src, Env: map[string]string{"A=B": "c"}}},
		{"uid out of range", api.ImportTemplateRequest{Name: "x", Rootfs: bad}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := p.ImportTemplate(ctx, tt.req); !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("ImportTemplate = %v, want invalid argument", err)
			}
		})
	}
	if _, err := p.TemplateVersion("x", "01"); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("TemplateVersion(x, 01) = %v, want invalid argument", err)
	}
	// The failed import of x left no version and no staging subvolume.
	ents, _ := os.ReadDir(filepath.Join(p.Root(), "templates", "x"))
	if len(ents) != 0 {
		t.Errorf("failed import left %d entries", len(ents))
	}
	if list, err := p.ListTemplates(); err != nil || len(list) != 0 {
		t.Errorf("ListTemplates = %v, %v; want none", list, err)
	}
}

// BenchmarkImportRealRootfs imports a real root filesystem, by default
// the base template's from the build cache (scripts/build-template.sh
// base --no-import; make test builds it), AGENTBOX_TEST_ROOTFS to choose
// another, and reports its speed. The integration tests import the same
// rootfs for their verdicts; this measures it:
//
//	go test -run '^$' -bench ImportRealRootfs -benchtime 3x ./internal/storage
func BenchmarkImportRealRootfs(b *testing.B) {
	src := os.Getenv("AGENTBOX_TEST_ROOTFS")
	if src == "" {
		src = "/var/lib/agentbox/build/base"
	}
	if _, err := os.Stat(filepath.Join(src, "etc", "passwd")); err != nil {
		b.Fatalf("no rootfs at %s (%v): run scripts/build-template.sh base --no-import, or set AGENTBOX_TEST_ROOTFS", src, err)
	}
	p, _ := newTestPool(b)
	var bytes int64
	for i := 0; b.Loop(); i++ {
		tpl, err := p.ImportTemplate(tenancy.Admin(context.Background()), api.ImportTemplateRequest{Name: fmt.Sprintf("real%d", i), Rootfs: src})
		if err != nil {
			b.Fatal(err)
		}
		bytes = tpl.SizeBytes
		var st unix.Stat_t
		if err := unix.Lstat(filepath.Join(tpl.Rootfs, "etc/passwd"), &st); err != nil || st.Uid != testUIDBase {
			b.Fatalf("etc/passwd: %v, uid %d", err, st.Uid)
		}
	}
	b.SetBytes(bytes)
}
