package storage

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/tenancy"
)

// makeUpper makes an overlay upper directory as a sandbox leaves one:
// files, a hard link pair, a symlink, a user xattr, an opaque directory,
// a whiteout, a fifo (left out of every tar) and a setuid file, owned in
// the sandbox range.
func makeUpper(t *testing.T, dir string) {
	t.Helper()
	own := func(p string, uid int) {
		if err := os.Lchown(p, testUIDBase+uid, testUIDBase+uid); err != nil {
			t.Fatal(err)
		}
	}
	must := func(err error) {
		if err != nil {
			t.Helper()
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "etc"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "etc/a"), []byte("A"), 0o640))
	must(os.Link(filepath.Join(dir, "etc/a"), filepath.Join(dir, "etc/a-link")))
	must(os.Symlink("/etc/a", filepath.Join(dir, "abs-link")))
	must(os.WriteFile(filepath.Join(dir, "suid"), []byte("#!/bin/sh\n"), 0o755))
	must(unix.Setxattr(filepath.Join(dir, "etc/a"), "user.note", []byte("kept"), 0))
	must(os.Mkdir(filepath.Join(dir, "opaque"), 0o750))
	must(os.WriteFile(filepath.Join(dir, "opaque/new"), []byte("N"), 0o600))
	must(unix.Setxattr(filepath.Join(dir, "opaque"), "user.overlay.opaque", []byte("y"), 0))
	must(unix.Setxattr(filepath.Join(dir, "opaque"), "user.overlay.origin", []byte("x"), 0))
	must(unix.Mknod(filepath.Join(dir, "etc/gone"), unix.S_IFCHR, 0))
	must(unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	for _, p := range []string{"etc", "etc/a", "abs-link", "opaque", "opaque/new", "etc/gone", "fifo", "suid"} {
		own(filepath.Join(dir, p), 7)
	}
	own(dir, 0)
	must(unix.Chmod(filepath.Join(dir, "suid"), 0o4755))
}

// describe lists a tree: name, type, mode, owner, size, link target,
// user xattrs, nlink, in order.
func describe(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(dir, p)
		line := []string{rel, strings.Join([]string{"type" + itoa(st.Mode>>12), itoa(st.Mode & 0o7777), itoa(st.Uid), itoa(st.Gid), itoa(uint32(st.Nlink)), itoa(uint32(st.Rdev)), itoa(uint32(st.Mtim.Nsec))}, ",")}
		if st.Mode&unix.S_IFMT == unix.S_IFREG {
			b, _ := os.ReadFile(p)
			line = append(line, string(b))
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			l, _ := os.Readlink(p)
			line = append(line, "-> "+l)
		}
		x, _ := userXattrs(p, st.Mode&unix.S_IFMT)
		var keys []string
		for k, v := range x {
			keys = append(keys, k+"="+string(v))
		}
		sort.Strings(keys)
		line = append(line, keys...)
		lines = append(lines, strings.Join(line, " "))
		return nil
	})
	return strings.Join(lines, "\n")
}

func itoa(n uint32) string { return uitoa(n) }

func uitoa(n uint32) string {
	var b [12]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			break
		}
	}
	return string(b[i:])
}

func testCtx() context.Context {
	return tenancy.With(context.Background(), tenancy.Principal{Admin: true})
}

// TestLayerTarOverlayRoundTrip packs an upper directory in overlay's
// format and applies it elsewhere: whiteouts, the opaque xattr (not
// overlay's others), user xattrs, hard links, symlinks, owners, modes
// (setuid) and mtimes to the nanosecond come back as they were; the fifo
// does not.
func TestLayerTarOverlayRoundTrip(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: owners and whiteouts")
	}
	src, dst := filepath.Join(t.TempDir(), "upper"), filepath.Join(t.TempDir(), "upper")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makeUpper(t, src)
	var buf bytes.Buffer
	if _, err := writeLayerTar(context.Background(), &buf, src, testUIDBase, 65536, tarOverlay); err != nil {
		t.Fatal(err)
	}
	var again bytes.Buffer
	if _, err := writeLayerTar(context.Background(), &again, src, testUIDBase, 65536, tarOverlay); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Error("two tars of the same tree differ")
	}
	a, err := newLayerApplier(testCtx(), dst, testUIDBase, 65536)
	if err != nil {
		t.Fatal(err)
	}
	a.overlay = true
	if err := a.apply(bytes.NewReader(buf.Bytes()), "layer"); err != nil {
		t.Fatal(err)
	}
	a.Close()
	// What the tar leaves out: the fifo and overlay's other xattrs.
	if err := os.Remove(filepath.Join(src, "fifo")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Removexattr(filepath.Join(src, "opaque"), "user.overlay.origin"); err != nil {
		t.Fatal(err)
	}
	want, got := describe(t, src), describe(t, dst)
	if want != got {
		t.Errorf("round trip differs:\nwant\n%s\ngot\n%s", want, got)
	}
	if !strings.Contains(got, "etc/gone type2,") || !strings.Contains(got, "user.overlay.opaque=y") || !strings.Contains(got, "suid type8,2541,") {
		t.Errorf("missing whiteout, opaque dir or hard link:\n%s", got)
	}
}

// TestLayerTarOCI packs the same directory as an OCI layer: the whiteout
// becomes .wh.gone and the opaque directory a .wh..wh..opq entry, and
// applied over a tree that has etc/gone and opaque/old, the image's
// whiteouts remove them.
func TestLayerTarOCI(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: owners and whiteouts")
	}
	src, dst := filepath.Join(t.TempDir(), "upper"), filepath.Join(t.TempDir(), "rootfs")
	for _, d := range []string{src, dst} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	makeUpper(t, src)
	var buf bytes.Buffer
	if _, err := writeLayerTar(context.Background(), &buf, src, testUIDBase, 65536, tarOCI); err != nil {
		t.Fatal(err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeChar {
			t.Errorf("an OCI layer holds a device: %s", h.Name)
		}
		for k := range h.PAXRecords {
			if strings.HasPrefix(k, xattrPAX+"user.overlay.") {
				t.Errorf("%s carries overlay's xattr %s", h.Name, k)
			}
		}
		names = append(names, h.Name)
	}
	joined := strings.Join(names, " ")
	for _, want := range []string{"etc/.wh.gone", "opaque/.wh..wh..opq", "etc/a-link"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no %s in %s", want, joined)
		}
	}
	// The layer below.
	base := func(p, c string) {
		os.MkdirAll(filepath.Dir(filepath.Join(dst, p)), 0o755)
		if err := os.WriteFile(filepath.Join(dst, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	base("etc/gone", "old")
	base("opaque/old", "old")
	a, err := newLayerApplier(testCtx(), dst, testUIDBase, 65536)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if err := a.apply(bytes.NewReader(buf.Bytes()), "layer"); err != nil {
		t.Fatal(err)
	}
	for _, gone := range []string{"etc/gone", "opaque/old"} {
		if _, err := os.Lstat(filepath.Join(dst, gone)); !os.IsNotExist(err) {
			t.Errorf("%s survived its whiteout: %v", gone, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(dst, "opaque/new")); err != nil || string(b) != "N" {
		t.Errorf("opaque/new: %q %v", b, err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(dst, "etc/a-link"), &st); err != nil || st.Nlink != 2 {
		t.Errorf("etc/a-link is not a hard link: %v %d", err, st.Nlink)
	}
	if v, err := unix.Getxattr(filepath.Join(dst, "etc/a"), "user.note", make([]byte, 16)); err != nil || v != 4 {
		t.Errorf("user.note not kept: %d %v", v, err)
	}
}

// cancelAfter is a writer that cancels its context once n bytes went
// through it.
type cancelAfter struct {
	n, seen int
	cancel  context.CancelFunc
}

func (c *cancelAfter) Write(p []byte) (int, error) {
	c.seen += len(p)
	if c.seen >= c.n {
		c.cancel()
	}
	return len(p), nil
}

// A tar called off stops inside a large file, not at its end: a
// background push giving way to a fork frees the node at once.
func TestLayerTarCancelInsideFile(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root: owners")
	}
	dir := filepath.Join(t.TempDir(), "upper")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 16 << 20
	big := filepath.Join(dir, "big")
	if err := os.WriteFile(big, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, big} {
		if err := os.Lchown(p, testUIDBase, testUIDBase); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := &cancelAfter{n: 1 << 20, cancel: cancel}
	_, err := writeLayerTar(ctx, w, dir, testUIDBase, 65536, tarOverlay)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("a tar called off: %v, want context.Canceled", err)
	}
	if w.seen >= size {
		t.Errorf("a tar called off after 1 MiB wrote %d bytes: the whole %d-byte file", w.seen, size)
	}
}
