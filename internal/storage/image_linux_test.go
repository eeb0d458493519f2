package storage

import (
	"archive/tar"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/storage/ocitest"
	"github.com/agentbox/agentbox/internal/tenancy"
)

type E = ocitest.Entry

// twoLayers is an image whose second layer deletes, replaces and makes
// opaque what the first made.
func twoLayers(t *testing.T, comp string) v1.Image {
	t.Helper()
	l1 := ocitest.Layer([]E{
		{Name: "bin/"},
		{Name: "bin/busybox", Body: "not really", Mode: 0o755},
		{Name: "bin/sh", Type: tar.TypeSymlink, Link: "busybox"},
		{Name: "bin/su", Body: "setuid", Mode: 0o4755},
		{Name: "bin/su2", Type: tar.TypeLink, Link: "bin/su"},
		{Name: "etc/"},
		{Name: "etc/keep", Body: "keep"},
		{Name: "etc/gone", Body: "gone"},
		{Name: "etc/dir/"},
		{Name: "etc/dir/a", Body: "a"},
		{Name: "etc/dir/sub/"},
		{Name: "etc/dir/sub/b", Body: "b"},
		{Name: "opq/"},
		{Name: "opq/old1", Body: "1"},
		{Name: "opq/olddir/"},
		{Name: "opq/olddir/x", Body: "x"},
		{Name: "home/"},
		{Name: "home/app/", UID: 1000, GID: 1000, Mode: 0o750},
		{Name: "./home/app/notes", Body: "n", UID: 1000, GID: 1000, Mode: 0o600},
		{Name: "replaced", Body: "file at first"},
	}, comp)
	l2 := ocitest.Layer([]E{
		{Name: "etc/.wh.gone"},
		{Name: "etc/.wh.dir"},
		{Name: "opq/"},
		{Name: "opq/new", Body: "new"},
		{Name: "opq/.wh..wh..opq"},
		{Name: "etc/.wh.never-was"},
		{Name: "replaced/"},
		{Name: "replaced/inside", Body: "now a dir"},
	}, comp)
	img, err := ocitest.Image(v1.Config{
		Env:        []string{"PATH=/bin", "GREETING=hello=world"},
		WorkingDir: "/home/app",
		User:       "1000:1000",
		Entrypoint: []string{"/bin/sh"},
		Cmd:        []string{"-c", "echo hi"},
	}, "", l1, l2)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

func TestImportImageFormats(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	dir := t.TempDir()
	cases := []struct {
		name  string
		write func(string, v1.Image) error
		path  string
		comp  string
	}{
		{"docker-gzip", ocitest.WriteDockerArchive, filepath.Join(dir, "docker.tar"), "gzip"},
		{"docker-zstd", ocitest.WriteDockerArchive, filepath.Join(dir, "dockerz.tar"), "zstd"},
		{"layout-dir-zstd", ocitest.WriteLayout, filepath.Join(dir, "layout"), "zstd"},
		{"layout-tar-gzip", ocitest.WriteLayoutTar, filepath.Join(dir, "layout.tar"), "gzip"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if err := c.write(c.path, twoLayers(t, c.comp)); err != nil {
				t.Fatal(err)
			}
			tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: c.name, Image: c.path, Env: map[string]string{"EXTRA": "1"}})
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			if tpl.User != "1000" || tpl.Workdir != "/home/app" || tpl.Env["PATH"] != "/bin" || tpl.Env["GREETING"] != "hello=world" || tpl.Env["EXTRA"] != "1" {
				t.Errorf("defaults = user %q workdir %q env %v", tpl.User, tpl.Workdir, tpl.Env)
			}
			if strings.Join(tpl.Cmd, " ") != "/bin/sh -c echo hi" || !strings.Contains(tpl.Source, "@sha256:") {
				t.Errorf("cmd %q source %q", tpl.Cmd, tpl.Source)
			}
			r := tpl.Rootfs
			for _, gone := range []string{"etc/gone", "etc/dir", "opq/old1", "opq/olddir"} {
				if _, err := os.Lstat(filepath.Join(r, gone)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s survived its whiteout: %v", gone, err)
				}
			}
			for f, want := range map[string]string{"etc/keep": "keep", "opq/new": "new", "replaced/inside": "now a dir", "bin/su2": "setuid"} {
				if b, err := os.ReadFile(filepath.Join(r, f)); err != nil || string(b) != want {
					t.Errorf("%s = %q, %v; want %q", f, b, err, want)
				}
			}
			if tgt, err := os.Readlink(filepath.Join(r, "bin/sh")); err != nil || tgt != "busybox" {
				t.Errorf("bin/sh -> %q, %v", tgt, err)
			}
			var st, st2 unix.Stat_t
			if err := unix.Lstat(filepath.Join(r, "bin/su"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Mode&0o7777 != 0o4755 || st.Uid != testUIDBase {
				t.Errorf("bin/su mode %o uid %d, want 4755 and %d", st.Mode&0o7777, st.Uid, testUIDBase)
			}
			_ = unix.Lstat(filepath.Join(r, "bin/su2"), &st2)
			if st.Ino != st2.Ino {
				t.Errorf("bin/su2 is not a hard link of bin/su")
			}
			fi, err := os.Stat(filepath.Join(r, "home/app/notes"))
			if err != nil || statUID(fi) != testUIDBase+1000 || fi.Mode().Perm() != 0o600 {
				t.Errorf("home/app/notes: %v uid %d mode %v", err, statUID(fi), fi.Mode())
			}
		})
	}
}

// TestImportImageHostile feeds the escape attempts of SECURITY.md item 30
// as image layers: each is refused (no template left) or contained inside
// the rootfs, and the host flag file is never touched.
func TestImportImageHostile(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	hostDir := t.TempDir()
	flag := filepath.Join(hostDir, "flag")
	if err := os.WriteFile(flag, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	rel := strings.Repeat("../", 12) + strings.TrimPrefix(flag, "/")
	oldBytes, oldEntries := maxImageBytes, maxImageEntries
	t.Cleanup(func() { maxImageBytes, maxImageEntries = oldBytes, oldEntries })
	maxImageBytes, maxImageEntries = 1<<20, 1000
	many := make([]E, 1001)
	for i := range many {
		many[i] = E{Name: "f" + strings.Repeat("x", i%50) + string(rune('a'+i%26)) + "/"}
	}

	cases := []struct {
		name    string
		entries []E
		wantErr string // "" = imported, contained
		check   func(t *testing.T, rootfs string)
	}{
		{"dotdot", []E{{Name: rel, Body: "pwned"}}, "'..'", nil},
		{"absolute", []E{{Name: flag, Body: "pwned"}}, "opening parent", nil},
		{"absolute-contained", []E{{Name: "/etc/"}, {Name: "/etc/abs", Body: "in"}}, "", func(t *testing.T, r string) {
			if b, _ := os.ReadFile(filepath.Join(r, "etc/abs")); string(b) != "in" {
				t.Errorf("etc/abs = %q", b)
			}
		}},
		{"symlink-dir-then-write", []E{{Name: "esc", Type: tar.TypeSymlink, Link: hostDir}, {Name: "esc/flag", Body: "pwned"}}, "opening parent", nil},
		{"symlink-dotdot-then-write", []E{{Name: "esc", Type: tar.TypeSymlink, Link: rel + "/.."}, {Name: "esc/flag", Body: "pwned"}}, "opening parent", nil},
		{"symlink-file-then-write", []E{{Name: "f", Type: tar.TypeSymlink, Link: flag}, {Name: "f", Body: "pwned"}}, "", func(t *testing.T, r string) {
			if b, _ := os.ReadFile(filepath.Join(r, "f")); string(b) != "pwned" {
				t.Errorf("f = %q: the second entry should replace the symlink in the tree", b)
			}
		}},
		{"hardlink-dotdot", []E{{Name: "h", Type: tar.TypeLink, Link: rel}}, "'..'", nil},
		{"hardlink-absolute", []E{{Name: "h", Type: tar.TypeLink, Link: flag}}, "hard link target", nil},
		{"hardlink-through-symlink", []E{{Name: "s", Type: tar.TypeSymlink, Link: flag}, {Name: "h", Type: tar.TypeLink, Link: "s"}}, "", func(t *testing.T, r string) {
			if fi, err := os.Lstat(filepath.Join(r, "h")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
				t.Errorf("h should be a link of the symlink itself: %v %v", fi, err)
			}
		}},
		{"device-nodes", []E{{Name: "dev/"}, {Name: "dev/sda", Type: tar.TypeBlock, Mode: 0o666}, {Name: "dev/kmsg", Type: tar.TypeChar}, {Name: "p", Type: tar.TypeFifo}}, "", func(t *testing.T, r string) {
			for _, n := range []string{"dev/sda", "dev/kmsg", "p"} {
				if _, err := os.Lstat(filepath.Join(r, n)); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s was created: %v", n, err)
				}
			}
		}},
		{"uid-out-of-range", []E{{Name: "x", Body: "x", UID: 70000}}, "outside the sandbox uid range", nil},
		{"too-big", []E{{Name: "big", Size: 2 << 20}}, "import limit", nil},
		{"sparse-terabyte", []E{{Name: "big", Size: 1 << 40}}, "import limit", nil},
		{"too-many-entries", many, "more than 1000 entries", nil},
		{"whiteout-escape", []E{{Name: strings.TrimSuffix(rel, "flag") + ".wh.flag"}}, "'..'", nil},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "img.tar")
			img, err := ocitest.Image(v1.Config{}, "", ocitest.RawLayer(ocitest.Tar(c.entries), "gzip"))
			if err != nil {
				t.Fatal(err)
			}
			if err := ocitest.WriteDockerArchive(path, img); err != nil {
				t.Fatal(err)
			}
			name := "hostile-" + string(rune('a'+i))
			tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Image: path})
			if b, _ := os.ReadFile(flag); string(b) != "untouched" {
				t.Fatalf("host flag file = %q", b)
			}
			if ents, _ := os.ReadDir(hostDir); len(ents) != 1 {
				t.Fatalf("host dir has %d entries", len(ents))
			}
			if c.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), c.wantErr) || !errors.Is(err, errdefs.ErrInvalidArgument) {
					t.Fatalf("err = %v, want one containing %q", err, c.wantErr)
				}
				if !strings.Contains(err.Error(), "layer 1 of 1") {
					t.Errorf("error does not name the layer: %v", err)
				}
				assertNoTemplate(t, p, name)
				return
			}
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			c.check(t, tpl.Rootfs)
		})
	}
}

func assertNoTemplate(t *testing.T, p *Pool, name string) {
	t.Helper()
	if _, err := p.Template(name); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("template %s exists after a failed import: %v", name, err)
	}
	ents, _ := os.ReadDir(filepath.Join(p.templatesDir(), name))
	for _, e := range ents {
		t.Errorf("left in templates/%s: %s", name, e.Name())
	}
	ents, _ = os.ReadDir(p.root)
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), stagingPrefix) {
			t.Errorf("left in the pool: %s", e.Name())
		}
	}
}

func TestImportImageBadInput(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	dir := t.TempDir()
	layer := ocitest.Layer([]E{{Name: "a", Body: strings.Repeat("data", 10000)}}, "gzip")

	arm, _ := ocitest.Image(v1.Config{}, "arm64", layer)
	if err := ocitest.WriteDockerArchive(filepath.Join(dir, "arm.tar"), arm); err != nil {
		t.Fatal(err)
	}
	good, _ := ocitest.Image(v1.Config{}, "", layer)
	if err := ocitest.WriteDockerArchive(filepath.Join(dir, "good.tar"), good); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "good.tar"))
	if err := os.WriteFile(filepath.Join(dir, "truncated.tar"), b[:len(b)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	// Flip bytes in the middle of the gzipped layer blob.
	corrupt := append([]byte{}, b...)
	ld, _ := layer.Digest()
	for i := len(corrupt)/2 - 8; i < len(corrupt)/2+8; i++ {
		corrupt[i] ^= 0xff
	}
	if err := os.WriteFile(filepath.Join(dir, "corrupt.tar"), corrupt, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := ocitest.WriteLayout(filepath.Join(dir, "missing"), good); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, "missing/blobs/sha256", ld.Hex)); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "notar"), []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}

	cases := []struct{ file, want string }{
		{"arm.tar", "this host runs linux/"},
		{"truncated.tar", "truncated.tar"},
		{"corrupt.tar", "corrupt.tar"},
		{"missing", "layer 1 of 1"},
		{"notar", "not a tar archive"},
		{"nonexistent", "nonexistent"},
	}
	for i, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			name := "bad-" + string(rune('a'+i))
			_, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: name, Image: filepath.Join(dir, c.file)})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("err is not invalid-argument: %v", err)
			}
			assertNoTemplate(t, p, name)
		})
	}
}
