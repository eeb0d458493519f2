package files

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

type tarEntry struct {
	name     string
	typ      byte
	body     string
	link     string
	mode     int64
	size     int64 // header size without data when > 0 and body is ""
	uid, gid int
}

// mkTar builds a tar; an entry with size set and no body ends the archive
// right after its header (a sparse or truncated giant).
func mkTar(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Linkname: e.link, Mode: mode, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(1_600_000_000, 0), Devmajor: 1, Devminor: 3, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
			if e.size > 0 {
				h.Size = e.size
			}
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("header %q: %v", e.name, err)
		}
		if e.size > 0 {
			buf.Write(make([]byte, 4096))
			return buf.Bytes()
		}
		if _, err := tw.Write([]byte(e.body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func gz(t testing.TB, b []byte) []byte {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(b)
	zw.Close()
	return buf.Bytes()
}

func TestArchiveRoundTrip(t *testing.T) {
	e := newEnv(t, Options{})
	src := e.host("src")
	deep := filepath.Join(src, strings.Repeat("d/", 80))
	mustWrite(t, filepath.Join(deep, "bottom.txt"), "bottom")
	mustWrite(t, filepath.Join(src, "a.txt"), "hello")
	mustWrite(t, filepath.Join(src, "bin/run"), "#!/bin/sh\n")
	os.Chmod(filepath.Join(src, "bin/run"), 0o750)
	os.Chown(filepath.Join(src, "a.txt"), 1000, 1000)
	mustMkdir(t, filepath.Join(src, "empty"))
	os.Chmod(filepath.Join(src, "empty"), 0o700)
	os.Symlink("a.txt", filepath.Join(src, "rel-link"))
	os.Symlink("/etc/shadow", filepath.Join(src, "abs-link"))
	os.Link(filepath.Join(src, "a.txt"), filepath.Join(src, "hard"))
	syscall.Mkfifo(filepath.Join(src, "fifo"), 0o644) // skipped
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	os.WriteFile(filepath.Join(src, "big"), big, 0o644)
	mtime := time.Unix(1_500_000_000, 0)
	os.Chtimes(filepath.Join(src, "a.txt"), mtime, mtime)
	os.Chtimes(filepath.Join(src, "empty"), mtime, mtime)

	tarball := expect(t, e.do("GET", "/files/archive", q("path", "/src"), nil), 200, "")
	for _, tc := range []struct {
		name, dst string
		body      []byte
		hdr       []string
	}{
		{"plain", "/dst", tarball, nil},
		{"gzip sniffed", "/dst-gz", gz(t, tarball), nil},
		{"gzip header", "/dst-gz2", gz(t, tarball), []string{"Content-Encoding", "gzip"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			expect(t, e.do("PUT", "/files/archive", q("path", tc.dst, "user", "root"), bytes.NewReader(tc.body), tc.hdr...), 200, "")
			compareTrees(t, src, e.host(tc.dst))
		})
	}
	var a, b syscall.Stat_t
	syscall.Stat(e.host("dst/a.txt"), &a)
	syscall.Stat(e.host("dst/hard"), &b)
	if a.Ino != b.Ino {
		t.Errorf("hard link not kept: inodes %d and %d", a.Ino, b.Ino)
	}
	if _, err := os.Lstat(e.host("dst/fifo")); !os.IsNotExist(err) {
		t.Errorf("fifo was archived and extracted")
	}

	// A single file archives as its base name.
	one := expect(t, e.do("GET", "/files/archive", q("path", "/src/a.txt"), nil), 200, "")
	tr := tar.NewReader(bytes.NewReader(one))
	h, err := tr.Next()
	if err != nil || h.Name != "a.txt" || h.Uid != 1000 || h.Mode != 0o644 || !h.ModTime.Equal(mtime) {
		t.Errorf("single-file archive header = %+v, %v", h, err)
	}
	expect(t, e.do("GET", "/files/archive", q("path", "/nope"), nil), 404, "")
}

// compareTrees checks that want and got hold the same names, types, modes,
// contents, link targets and file mtimes (fifos etc. are not compared).
func compareTrees(t *testing.T, want, got string) {
	t.Helper()
	seen := 0
	filepath.WalkDir(want, func(p string, d fs.DirEntry, err error) error {
		if err != nil || p == want {
			return err
		}
		rel, _ := filepath.Rel(want, p)
		wi, _ := os.Lstat(p)
		if !wi.Mode().IsRegular() && !wi.IsDir() && wi.Mode()&fs.ModeSymlink == 0 {
			return nil
		}
		seen++
		gi, err := os.Lstat(filepath.Join(got, rel))
		if err != nil {
			t.Errorf("%s missing after extraction: %v", rel, err)
			return nil
		}
		if gi.Mode() != wi.Mode() {
			t.Errorf("%s: mode %v, want %v", rel, gi.Mode(), wi.Mode())
		}
		switch {
		case wi.Mode().IsRegular():
			wb, _ := os.ReadFile(p)
			gb, _ := os.ReadFile(filepath.Join(got, rel))
			if !bytes.Equal(wb, gb) {
				t.Errorf("%s: content differs", rel)
			}
			if !gi.ModTime().Equal(wi.ModTime().Truncate(time.Second)) {
				t.Errorf("%s: mtime %v, want %v", rel, gi.ModTime(), wi.ModTime())
			}
		case wi.Mode()&fs.ModeSymlink != 0:
			wl, _ := os.Readlink(p)
			gl, _ := os.Readlink(filepath.Join(got, rel))
			if wl != gl {
				t.Errorf("%s: link target %q, want %q", rel, gl, wl)
			}
		case rel == "empty":
			if !gi.ModTime().Equal(wi.ModTime()) {
				t.Errorf("%s: dir mtime %v, want %v", rel, gi.ModTime(), wi.ModTime())
			}
		}
		return nil
	})
	if seen < 80 {
		t.Errorf("compared only %d entries", seen)
	}
}

// SECURITY.md item 30.
func TestArchiveHostile(t *testing.T) {
	e := newEnv(t, Options{MaxArchiveEntries: 20, MaxArchiveBytes: 8 << 20})
	mustMkdir(t, e.host("x"))
	os.Symlink(filepath.Join(e.outer, "flag"), e.host("x/pre")) // planted by the sandbox
	many := make([]tarEntry, 25)
	for i := range many {
		many[i] = tarEntry{name: "f" + strings.Repeat("x", i)}
	}
	bomb := gz(t, mkTar(t, tarEntry{name: "zeros", body: string(make([]byte, 64<<20))}))

	tests := []struct {
		name   string
		user   string
		body   []byte
		status int
		msg    string
		check  func(t *testing.T)
	}{
		{name: "dotdot", body: mkTar(t, tarEntry{name: "../escape", body: "x"}), status: 400, msg: `contains ".."`,
			check: absent(e, "escape")},
		{name: "dotdot nested", body: mkTar(t, tarEntry{name: "a/../../escape", body: "x"}), status: 400, msg: `contains ".."`,
			check: absent(e, "escape")},
		{name: "absolute", body: mkTar(t, tarEntry{name: "/etc/evil", body: "x"}), status: 400, msg: "absolute",
			check: absent(e, "etc/evil")},
		{name: "symlink to / then write", body: mkTar(t,
			tarEntry{name: "l", typ: tar.TypeSymlink, link: "/"},
			tarEntry{name: "l/etc/evil", body: "x"}), status: 400, msg: "outside /x through a symlink",
			check: absent(e, "etc/evil")},
		{name: "symlink up then write", body: mkTar(t,
			tarEntry{name: "up", typ: tar.TypeSymlink, link: "../.."},
			tarEntry{name: "up/flag", body: "x"}), status: 400, msg: "outside",
			check: absent(e, "flag")},
		{name: "symlink to host path then write", body: mkTar(t,
			tarEntry{name: "h", typ: tar.TypeSymlink, link: e.outer + "/etc"},
			tarEntry{name: "h/shadow", body: "PWNED"}), status: 400, msg: "outside"},
		{name: "symlink then file of the same name", body: mkTar(t,
			tarEntry{name: "s", typ: tar.TypeSymlink, link: "/etc/shadow"},
			tarEntry{name: "s", body: "PWNED"}), status: 200,
			check: func(t *testing.T) {
				if b, _ := os.ReadFile(e.host("etc/shadow")); string(b) != "sandbox-shadow" {
					t.Errorf("wrote through the symlink: /etc/shadow = %q", b)
				}
				if fi, err := os.Lstat(e.host("x/s")); err != nil || !fi.Mode().IsRegular() {
					t.Errorf("x/s should be a regular file: %v %v", fi, err)
				}
			}},
		{name: "file over a planted symlink", body: mkTar(t, tarEntry{name: "pre", body: "PWNED"}), status: 200},
		{name: "hardlink with dotdot", body: mkTar(t, tarEntry{name: "h1", typ: tar.TypeLink, link: "../etc/shadow"}),
			status: 400, msg: "outside the target directory", check: absent(e, "x/h1")},
		{name: "hardlink absolute", body: mkTar(t, tarEntry{name: "h2", typ: tar.TypeLink, link: "/etc/shadow"}),
			status: 400, msg: "outside the target directory", check: absent(e, "x/h2")},
		{name: "hardlink through symlink", body: mkTar(t,
			tarEntry{name: "le", typ: tar.TypeSymlink, link: "/etc"},
			tarEntry{name: "h3", typ: tar.TypeLink, link: "le/shadow"}), status: 400, msg: "outside",
			check: absent(e, "x/h3")},
		{name: "hardlink to missing", body: mkTar(t, tarEntry{name: "h4", typ: tar.TypeLink, link: "nothing"}),
			status: 400, msg: "not in the archive before it"},
		{name: "hardlink inside", body: mkTar(t,
			tarEntry{name: "orig", body: "o"},
			tarEntry{name: "sub/h5", typ: tar.TypeLink, link: "orig"}), status: 200,
			check: func(t *testing.T) {
				if b, err := os.ReadFile(e.host("x/sub/h5")); err != nil || string(b) != "o" {
					t.Errorf("hard link inside: %q %v", b, err)
				}
			}},
		{name: "devices and fifos skipped", body: mkTar(t,
			tarEntry{name: "null", typ: tar.TypeChar},
			tarEntry{name: "sda", typ: tar.TypeBlock},
			tarEntry{name: "pipe", typ: tar.TypeFifo}), status: 200,
			check: func(t *testing.T) {
				for _, n := range []string{"x/null", "x/sda", "x/pipe"} {
					absent(e, n)(t)
				}
			}},
		{name: "setuid stripped for user", user: "user", body: mkTar(t,
			tarEntry{name: "suid", body: "x", mode: 0o6755},
			tarEntry{name: "sgid-dir", typ: tar.TypeDir, mode: 0o2775}), status: 200,
			check: func(t *testing.T) {
				wantMode(t, e.host("x/suid"), 0o755, 1000)
				wantMode(t, e.host("x/sgid-dir"), 0o775, 1000)
			}},
		{name: "setuid kept for root", user: "root", body: mkTar(t, tarEntry{name: "suid-root", body: "x", mode: 0o4755}),
			status: 200, check: func(t *testing.T) { wantMode(t, e.host("x/suid-root"), 0o4755, 0) }},
		{name: "tar uid ignored", user: "user", body: mkTar(t, tarEntry{name: "owned", body: "x", uid: 0, gid: 0}),
			status: 200, check: func(t *testing.T) { wantMode(t, e.host("x/owned"), 0o644, 1000) }},
		{name: "too many entries", body: mkTar(t, many...), status: http.StatusRequestEntityTooLarge, msg: "more than 20 entries"},
		{name: "sparse terabyte", body: mkTar(t, tarEntry{name: "tb", size: 1 << 40}),
			status: http.StatusRequestEntityTooLarge, msg: "more than 8388608 bytes", check: absent(e, "x/tb")},
		{name: "gzip bomb", body: bomb, status: http.StatusRequestEntityTooLarge, msg: "more than",
			check: absent(e, "x/zeros")},
		{name: "gzip of zeros", body: gz(t, make([]byte, 32<<20)), status: 200},
		{name: "not a tar", body: []byte(strings.Repeat("garbage!", 200)), status: 400, msg: "reading archive"},
		{name: "dot as a file", body: mkTar(t, tarEntry{name: ".", typ: tar.TypeReg}), status: 400, msg: "target directory itself"},
		{name: "long component", body: mkTar(t, tarEntry{name: strings.Repeat("n", 300), body: "x"}), status: 400, msg: "longer than 255"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := []string{"path", "/x"}
			if tt.user != "" {
				args = append(args, "user", tt.user)
			}
			start := time.Now()
			expect(t, e.do("PUT", "/files/archive", q(args...), bytes.NewReader(tt.body)), tt.status, tt.msg)
			// A bomb's expansion would take minutes; a loaded host
			// takes seconds at most.
			if d := time.Since(start); d > 60*time.Second {
				t.Errorf("took %v", d)
			}
			if tt.check != nil {
				tt.check(t)
			}
			e.checkHostUntouched()
		})
	}
	if b, _ := os.ReadFile(e.host("etc/shadow")); string(b) != "sandbox-shadow" {
		t.Errorf("root's /etc/shadow changed: %q", b)
	}
	t.Run("target is a file", func(t *testing.T) {
		expect(t, e.do("PUT", "/files/archive", q("path", "/etc/passwd"), bytes.NewReader(mkTar(t))), 409, "not a directory")
	})
}

func absent(e *env, rel string) func(t *testing.T) {
	return func(t *testing.T) {
		t.Helper()
		if _, err := os.Lstat(e.host(rel)); !os.IsNotExist(err) {
			t.Errorf("%s exists; it must not", rel)
		}
	}
}

func wantMode(t *testing.T, p string, mode, uid uint32) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&0o7777 != mode || st.Uid != uid {
		t.Errorf("%s: mode %o uid %d, want %o %d", p, st.Mode&0o7777, st.Uid, mode, uid)
	}
}

// FuzzExtract feeds arbitrary bytes to the extractor and checks that
// nothing outside the target directory changes and that no device, fifo
// or setuid file appears inside it.
func FuzzExtract(f *testing.F) {
	f.Add(mkTar(f, tarEntry{name: "a/b", body: "x"}, tarEntry{name: "a/l", typ: tar.TypeSymlink, link: "/"}))
	f.Add(mkTar(f, tarEntry{name: "l", typ: tar.TypeSymlink, link: ".."}, tarEntry{name: "l/x", body: "x"}))
	f.Add(mkTar(f, tarEntry{name: "f", body: "x", mode: 0o4755}, tarEntry{name: "h", typ: tar.TypeLink, link: "f"}))
	f.Add(mkTar(f, tarEntry{name: "d", typ: tar.TypeDir}, tarEntry{name: "n", typ: tar.TypeChar}))
	f.Add([]byte("not a tar"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if os.Geteuid() != 0 {
			t.Skip("needs root")
		}
		outer := t.TempDir()
		mustWrite(t, filepath.Join(outer, "flag"), "HOST")
		p := filepath.Join(outer, "p")
		mustMkdir(t, p)
		fd, err := unix.Open(p, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		x := &extractor{dir: fd, p: "/p", owner: owner{uid: 1000, gid: 1000}, buf: make([]byte, 4096),
			maxBytes: 1 << 20, maxEntries: 100}
		_ = x.extract(tar.NewReader(io.LimitReader(bytes.NewReader(data), 4<<20)))

		ents, _ := os.ReadDir(outer)
		if len(ents) != 2 {
			t.Fatalf("outside the target: %v", ents)
		}
		if b, _ := os.ReadFile(filepath.Join(outer, "flag")); string(b) != "HOST" {
			t.Fatalf("flag outside the target changed: %q", b)
		}
		filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			fi, err := os.Lstat(path)
			if err != nil {
				return nil
			}
			m := fi.Mode()
			if m&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
				t.Errorf("special file extracted: %s %v", path, m)
			}
			if m&(fs.ModeSetuid|fs.ModeSetgid) != 0 {
				t.Errorf("setuid/setgid kept for a non-root owner: %s %v", path, m)
			}
			return nil
		})
	})
}
