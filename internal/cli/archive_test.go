package cli

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestTarRoundTrip(t *testing.T) {
	src := t.TempDir()
	mustWrite(t, filepath.Join(src, "run.sh"), "#!/bin/sh\necho hi\n", 0o755)
	mustWrite(t, filepath.Join(src, "secret"), "s", 0o600)
	if err := os.MkdirAll(filepath.Join(src, "sub", "deep"), 0o750); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "sub", "deep", "f.txt"), "deep", 0o644)
	if err := os.Symlink("../run.sh", filepath.Join(src, "sub", "link")); err != nil {
		t.Fatal(err)
	}
	// A read-only directory must still be extracted into.
	if err := os.Mkdir(filepath.Join(src, "ro"), 0o755); err != nil {
		t.Fatal(err)
	}
	mustWrite(t, filepath.Join(src, "ro", "x"), "x", 0o444)
	if err := os.Chmod(filepath.Join(src, "ro"), 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(src, "ro"), 0o755) })

	var buf bytes.Buffer
	if err := writeTar(&buf, src, io.Discard); err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	if err := extractTar(&buf, dst, io.Discard); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(filepath.Join(dst, "ro"), 0o755) })

	for _, tt := range []struct {
		rel      string
		mode     os.FileMode
		contents string
	}{
		{"run.sh", 0o755, "#!/bin/sh\necho hi\n"},
		{"secret", 0o600, "s"},
		{"sub", 0o750 | os.ModeDir, ""},
		{"sub/deep/f.txt", 0o644, "deep"},
		{"ro", 0o555 | os.ModeDir, ""},
		{"ro/x", 0o444, "x"},
	} {
		p := filepath.Join(dst, tt.rel)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", tt.rel, err)
			continue
		}
		if fi.Mode() != tt.mode {
			t.Errorf("%s: mode %v, want %v", tt.rel, fi.Mode(), tt.mode)
		}
		if !fi.IsDir() {
			if b, _ := os.ReadFile(p); string(b) != tt.contents {
				t.Errorf("%s: contents %q, want %q", tt.rel, b, tt.contents)
			}
		}
	}
	if target, err := os.Readlink(filepath.Join(dst, "sub", "link")); err != nil || target != "../run.sh" {
		t.Errorf("symlink = %q, %v; want ../run.sh", target, err)
	}
}

// entry is one header of a hand-made archive.
type entry struct {
	name, link, body string
	typ              byte
	mode             int64
}

func makeTar(t *testing.T, entries []entry) *bytes.Buffer {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		hdr := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: mode, Size: int64(len(e.body))}
		if e.typ != tar.TypeReg {
			hdr.Size = 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if hdr.Size > 0 {
			io.WriteString(tw, e.body)
		}
	}
	tw.Close()
	return &buf
}

func TestExtractTarHostile(t *testing.T) {
	tests := []struct {
		name    string
		entries []entry
		wantErr string
	}{
		{name: "dotdot", entries: []entry{{name: "../evil", typ: tar.TypeReg, body: "x"}}, wantErr: "climbs out"},
		{name: "dotdot inside", entries: []entry{{name: "a/../../evil", typ: tar.TypeReg, body: "x"}}, wantErr: "climbs out"},
		{name: "absolute", entries: []entry{{name: "/tmp/evil", typ: tar.TypeReg, body: "x"}}, wantErr: "absolute path"},
		{name: "symlink then write through it", entries: []entry{
			{name: "d", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "d/pwned", typ: tar.TypeReg, body: "x"},
		}, wantErr: "is a symlink"},
		{name: "symlink then dir through it", entries: []entry{
			{name: "d", typ: tar.TypeSymlink, link: "OUTSIDE"},
			{name: "d/sub/", typ: tar.TypeDir},
		}, wantErr: "is a symlink"},
		{name: "hard link out", entries: []entry{{name: "h", typ: tar.TypeLink, link: "../../etc/passwd"}}, wantErr: "climbs out"},
		{name: "hard link absolute", entries: []entry{{name: "h", typ: tar.TypeLink, link: "/etc/passwd"}}, wantErr: "absolute path"},
		{name: "hard link through symlink", entries: []entry{
			{name: "s", typ: tar.TypeSymlink, link: "OUTSIDE/secret"},
			{name: "h", typ: tar.TypeLink, link: "s"},
		}, wantErr: "not a regular file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			dst := filepath.Join(base, "dst")
			outside := filepath.Join(base, "OUTSIDE")
			for _, d := range []string{dst, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			mustWrite(t, filepath.Join(outside, "secret"), "host secret", 0o600)
			// Symlink targets are relative to dst's entries: make OUTSIDE
			// reachable as a sibling the way a hostile link would name it.
			for i := range tt.entries {
				if tt.entries[i].link == "OUTSIDE" || strings.HasPrefix(tt.entries[i].link, "OUTSIDE/") {
					tt.entries[i].link = filepath.Join(base, tt.entries[i].link)
				}
			}
			err := extractTar(makeTar(t, tt.entries), dst, io.Discard)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("extractTar error = %v, want one containing %q", err, tt.wantErr)
			}
			names, _ := os.ReadDir(outside)
			if len(names) != 1 {
				t.Errorf("the directory outside dst now holds %d entries, want only the planted one", len(names))
			}
			if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "host secret" {
				t.Errorf("outside file changed: %q", b)
			}
			if _, err := os.Stat(filepath.Join(base, "evil")); err == nil {
				t.Errorf("a file was written outside dst")
			}
		})
	}
}

func TestExtractTarSafeCases(t *testing.T) {
	dst := t.TempDir()
	// A symlink replaced by a regular file of the same name: the file
	// replaces the link instead of writing through it.
	outside := t.TempDir()
	mustWrite(t, filepath.Join(outside, "target"), "keep", 0o644)
	buf := makeTar(t, []entry{
		{name: "./", typ: tar.TypeDir, mode: 0o700},
		{name: "f", typ: tar.TypeSymlink, link: filepath.Join(outside, "target")},
		{name: "f", typ: tar.TypeReg, body: "new"},
		{name: "suid", typ: tar.TypeReg, body: "x", mode: 0o4755},
		{name: "hl", typ: tar.TypeLink, link: "suid"},
		{name: "fifo", typ: tar.TypeFifo},
		{name: "auto/created/parent", typ: tar.TypeReg, body: "p"},
	})
	var warn bytes.Buffer
	if err := extractTar(buf, dst, &warn); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "target")); string(b) != "keep" {
		t.Errorf("wrote through a symlink: outside file is %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "f")); string(b) != "new" {
		t.Errorf("f = %q, want new", b)
	}
	if fi, _ := os.Stat(filepath.Join(dst, "suid")); fi.Mode() != 0o755 {
		t.Errorf("suid mode = %v, want set-id dropped (0755)", fi.Mode())
	}
	if fi, _ := os.Stat(filepath.Join(dst, "hl")); fi == nil || !fi.Mode().IsRegular() {
		t.Errorf("hard link not extracted")
	}
	if _, err := os.Lstat(filepath.Join(dst, "fifo")); err == nil {
		t.Errorf("a fifo was created")
	}
	if !strings.Contains(warn.String(), "skipped 1 special file") {
		t.Errorf("warning = %q, want a note about the skipped fifo", warn.String())
	}
	if fi, _ := os.Stat(dst); fi.Mode().Perm() != 0o700 {
		t.Errorf("root mode = %v, want 0700 from the ./ entry", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(dst, "auto", "created", "parent")); string(b) != "p" {
		t.Errorf("auto/created/parent = %q", b)
	}
}

func mustWrite(t *testing.T, p, s string, mode os.FileMode) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(p, mode); err != nil {
		t.Fatal(err)
	}
}
