package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/tenancy"
)

// FuzzApplyLayer applies arbitrary bytes as an image layer, twice (the
// second pass meets what the first made), into a root filesystem inside a
// directory that plays the host: the applier runs as root on the daemon's
// host for every image a tenant uploads. Whatever the bytes: no panic,
// nothing outside the root is created, changed or removed, no device,
// fifo or socket appears, every owner is inside the sandbox uid range,
// and no more file data is written than the owner's limit.
func FuzzApplyLayer(f *testing.F) {
	mk := func(hs ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			if h.Typeflag == tar.TypeReg {
				h.Size = int64(len(h.Linkname)) // the body, carried in Linkname below
				body := h.Linkname
				h.Linkname = ""
				_ = tw.WriteHeader(&h)
				_, _ = tw.Write([]byte(body))
				continue
			}
			_ = tw.WriteHeader(&h)
		}
		_ = tw.Close()
		return b.Bytes()
	}
	reg := func(name, body string, mode int64) tar.Header {
		return tar.Header{Name: name, Typeflag: tar.TypeReg, Linkname: body, Mode: mode}
	}
	f.Add(mk(tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../.."}, reg("up/flag", "PWNED", 0o644)))
	f.Add(mk(tar.Header{Name: "abs", Typeflag: tar.TypeSymlink, Linkname: "/etc"}, reg("abs/shadow", "PWNED", 0o644)))
	f.Add(mk(tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../flag"}))
	f.Add(mk(reg("../flag", "PWNED", 0o644), reg("/etc/shadow", "PWNED", 0o644)))
	f.Add(mk(tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}))
	f.Add(mk(reg("suid", "x", 0o4755), tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40}))
	f.Add(mk(tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Uid: 1 << 30}, reg("d/.wh..wh..opq", "", 0), reg(".wh...", "", 0)))
	f.Add(mk(reg("a", "1", 0o644), tar.Header{Name: "a/b", Typeflag: tar.TypeDir}, reg(".wh.a", "", 0)))
	f.Add([]byte("not a tar"))
	maxImageEntries = 1000 // this process only fuzzes
	f.Fuzz(func(t *testing.T, data []byte) {
		if os.Geteuid() != 0 {
			t.Fatal("FuzzApplyLayer needs root: the applier sets owners")
		}
		outer := t.TempDir()
		root := filepath.Join(outer, "rootfs")
		for _, d := range []string{root, filepath.Join(outer, "etc")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		for p, c := range map[string]string{"flag": "HOST-FLAG", "etc/shadow": "HOST-SHADOW"} {
			if err := os.WriteFile(filepath.Join(outer, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		before := outside(outer)
		const limit = 1 << 20
		ctx := WithMaxBytes(tenancy.With(context.Background(), tenancy.Principal{Tenant: "fuzz"}), limit)
		a, err := newLayerApplier(ctx, root, testUIDBase, 65536)
		if err != nil {
			t.Fatal(err)
		}
		defer a.Close()
		for pass := 0; pass < 2; pass++ {
			if a.apply(bytes.NewReader(data), "layer") != nil {
				break
			}
		}
		if a.size > limit {
			t.Fatalf("wrote %d bytes of files, past the limit of %d", a.size, limit)
		}
		if after := outside(outer); after != before {
			t.Fatalf("changed what is outside the root:\nbefore %s\nafter  %s", before, after)
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			if fi.Mode()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
				t.Errorf("special file %s (%v)", p, fi.Mode())
			}
			if p == root {
				return nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid < testUIDBase || st.Uid >= testUIDBase+65536 || st.Gid < testUIDBase || st.Gid >= testUIDBase+65536 {
				t.Errorf("%s owned by %d:%d, outside the sandbox range", p, st.Uid, st.Gid)
			}
			return nil
		})
	})
}

// outside describes everything under outer but the rootfs.
func outside(outer string) string {
	var b strings.Builder
	filepath.WalkDir(outer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			b.WriteString(p + " error\n")
			return nil
		}
		if p == filepath.Join(outer, "rootfs") {
			return filepath.SkipDir
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		b.WriteString(p + " " + fi.Mode().String())
		if fi.Mode().IsRegular() {
			c, _ := os.ReadFile(p)
			b.WriteString(" " + string(c))
		}
		b.WriteString("\n")
		return nil
	})
	return b.String()
}

// FuzzApplyOverlayLayer applies arbitrary bytes as a pulled snapshot's
// layer (the applier's overlay mode, which a snapshot pull runs as root on
// whatever a registry serves): as FuzzApplyLayer, nothing outside the
// root changes, every owner is in the sandbox range and the limit holds;
// the only special file that may appear is a 0/0 whiteout, and no xattr
// of overlay's but user.overlay.opaque.
func FuzzApplyOverlayLayer(f *testing.F) {
	mk := func(hs ...tar.Header) []byte {
		var b bytes.Buffer
		tw := tar.NewWriter(&b)
		for _, h := range hs {
			_ = tw.WriteHeader(&h)
		}
		_ = tw.Close()
		return b.Bytes()
	}
	f.Add(mk(tar.Header{Name: "gone", Typeflag: tar.TypeChar, Mode: 0o644}))
	f.Add(mk(tar.Header{Name: "dev", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 3}, tar.Header{Name: "blk", Typeflag: tar.TypeBlock, Devmajor: 8}))
	f.Add(mk(tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, PAXRecords: map[string]string{
		"SCHILY.xattr.user.overlay.opaque": "y", "SCHILY.xattr.user.overlay.redirect": "/etc", "SCHILY.xattr.trusted.overlay.opaque": "y", "SCHILY.xattr.security.capability": "x"}}))
	f.Add(mk(tar.Header{Name: "up", Typeflag: tar.TypeSymlink, Linkname: "../.."}, tar.Header{Name: "up/flag", Typeflag: tar.TypeReg}))
	f.Add(mk(tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: "../flag"}, tar.Header{Name: ".wh.x", Typeflag: tar.TypeReg}))
	f.Add(mk(tar.Header{Name: "big", Typeflag: tar.TypeReg, Size: 1 << 40}))
	maxImageEntries = 1000
	f.Fuzz(func(t *testing.T, data []byte) {
		if os.Geteuid() != 0 {
			t.Fatal("FuzzApplyOverlayLayer needs root: the applier sets owners")
		}
		outer := t.TempDir()
		root := filepath.Join(outer, "rootfs")
		for _, d := range []string{root, filepath.Join(outer, "etc")} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(filepath.Join(outer, "flag"), []byte("HOST-FLAG"), 0o644); err != nil {
			t.Fatal(err)
		}
		before := outside(outer)
		const limit = 1 << 20
		ctx := WithMaxBytes(tenancy.With(context.Background(), tenancy.Principal{Tenant: "fuzz"}), limit)
		a, err := newLayerApplier(ctx, root, testUIDBase, 65536)
		if err != nil {
			t.Fatal(err)
		}
		a.overlay = true
		defer a.Close()
		_ = a.apply(bytes.NewReader(data), "layer")
		if a.size > limit {
			t.Fatalf("wrote %d bytes of files, past the limit of %d", a.size, limit)
		}
		if after := outside(outer); after != before {
			t.Fatalf("changed what is outside the root:\nbefore %s\nafter  %s", before, after)
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || p == root {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return nil
			}
			st := fi.Sys().(*syscall.Stat_t)
			if fi.Mode()&(fs.ModeDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 && !(fi.Mode()&fs.ModeCharDevice != 0 && st.Rdev == 0) {
				t.Errorf("special file %s (%v, rdev %d)", p, fi.Mode(), st.Rdev)
			}
			if st.Uid < testUIDBase || st.Uid >= testUIDBase+65536 || st.Gid < testUIDBase || st.Gid >= testUIDBase+65536 {
				t.Errorf("%s owned by %d:%d, outside the sandbox range", p, st.Uid, st.Gid)
			}
			for _, x := range []string{"user.overlay.redirect", "trusted.overlay.opaque", "security.capability"} {
				if n, err := unix.Lgetxattr(p, x, nil); err == nil && n >= 0 {
					t.Errorf("%s has xattr %s", p, x)
				}
			}
			return nil
		})
	})
}
