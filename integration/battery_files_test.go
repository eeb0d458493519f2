package integration

// Battery items 28-30: the file API, driven through the Go SDK, judged by
// host files that must stay untouched and by where things land.

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

func itemFilePaths(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	ctx := context.Background()
	marker := "agentbox-escape-" + randHex(6)
	bad := []string{
		"../../../../var/tmp/" + marker,
		"/root/../../../../var/tmp/" + marker,
		"/../../var/tmp/" + marker,
		"/root/./" + marker,
		"//var/tmp/" + marker,
		"/root/" + marker + "/",
		"/root/a\x00/../../var/tmp/" + marker,
		"/root/" + strings.Repeat("a", 300),
		"/" + strings.Repeat("d/", 2100) + marker,
		"var/tmp/" + marker,
	}
	ops := map[string]func(p string) error{
		"write": func(p string) error {
			_, err := env.client.WriteFile(ctx, id, p, strings.NewReader(marker), 0o644)
			return err
		},
		"read": func(p string) error {
			rc, err := env.client.ReadFile(ctx, id, p)
			if err == nil {
				rc.Close()
			}
			return err
		},
		"stat":  func(p string) error { _, err := env.client.Stat(ctx, id, p); return err },
		"mkdir": func(p string) error { _, err := env.client.Mkdir(ctx, id, p, 0o755); return err },
		"remove": func(p string) error {
			return env.client.Remove(ctx, id, p, true)
		},
		"rename": func(p string) error { return env.client.Rename(ctx, id, "/etc/hostname", p) },
		"list":   func(p string) error { _, err := env.client.ListFiles(ctx, id, p, 1); return err },
		"upload": func(p string) error { return env.client.UploadArchive(ctx, id, p, bytes.NewReader(emptyTar())) },
	}
	n := 0
	for _, p := range bad {
		for name, op := range ops {
			err := op(p)
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s %.60q: %v; want an invalid-argument (400) error", name, p, err)
			}
			n++
		}
	}
	if _, err := os.Stat("/var/tmp/" + marker); err == nil {
		os.Remove("/var/tmp/" + marker)
		t.Errorf("a file API call wrote /var/tmp/%s on the host", marker)
	}
	evidence(t, "%d calls with %d bad paths (.., ./, //, trailing /, NUL, 300-byte name, 4 KiB path, relative): all 400; nothing on the host", n, len(bad))
}

func emptyTar() []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.Close()
	return buf.Bytes()
}

func readString(ctx context.Context, id, path string) (string, error) {
	rc, err := env.client.ReadFile(ctx, id, path)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, 1<<20))
	return string(b), err
}

func itemFileSymlinks(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{})
	ctx := context.Background()
	base := filepath.Base(b.hostFlag)
	mustSh(t, id, "ln -s /etc/shadow /root/shadow && ln -s "+b.hostFlag+" /root/flag && ln -s / /root/up && ln -s /var/tmp /root/vartmp && ln -s ../../../../../../var/tmp /root/rel")
	hostShadow, _ := os.ReadFile("/etc/shadow")
	var seen []string
	check := func(what, got string, err error) {
		if len(hostShadow) > 0 && got != "" && strings.Contains(string(hostShadow), got) {
			t.Errorf("%s returned content of the host's /etc/shadow", what)
		}
		b.noSecrets(t, got)
		if err != nil {
			seen = append(seen, what+": "+errClass(err))
		} else {
			seen = append(seen, what+": "+truncate(got, 30))
		}
	}
	got, err := readString(ctx, id, "/root/shadow")
	check("shadow link (none inside)", got, err)
	if err == nil {
		t.Errorf("reading a link to a missing /etc/shadow returned %q", got)
	}
	own := "sandbox-shadow-" + randHex(6)
	if _, err := env.client.WriteFile(ctx, id, "/etc/shadow", strings.NewReader(own), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err = readString(ctx, id, "/root/shadow")
	check("shadow link (planted)", got, err)
	if got != own {
		t.Errorf("reading the link to /etc/shadow returned %q, %v; want the sandbox's own %q", got, err, own)
	}
	for _, p := range []string{"/root/flag", "/root/vartmp/" + base, "/root/rel/" + base, "/proc/self/root" + b.hostFlag, "/proc/1/root" + b.hostFlag} {
		got, err = readString(ctx, id, p)
		check(p, got, err)
	}
	// Listing and archiving through links stay inside too.
	if rc, err := env.client.DownloadArchive(ctx, id, "/root/vartmp"); err == nil {
		data, _ := io.ReadAll(io.LimitReader(rc, 16<<20))
		rc.Close()
		b.noSecrets(t, string(data))
	}
	// Uploads through links land inside the sandbox.
	name := "battery-up-" + randHex(6)
	marker := "uploaded-" + randHex(6)
	for _, p := range []string{"/root/up/" + name, "/root/vartmp/" + base, "/root/rel/" + name, "/root/vartmp/" + name} {
		_, err := env.client.WriteFile(ctx, id, p, strings.NewReader(marker), 0o644)
		seen = append(seen, "write "+p+": "+errClass(err))
	}
	for _, h := range []string{"/" + name, "/var/tmp/" + name} {
		if _, err := os.Stat(h); err == nil {
			os.Remove(h)
			t.Errorf("an upload through a symlink created %s on the host", h)
		}
	}
	inside := mustSh(t, id, "cat /"+name+" /var/tmp/"+name+" 2>&1; echo; cat /var/tmp/"+base)
	evidence(t, "%s; inside after uploads: %q", strings.Join(seen, "; "), inside)
	if !strings.Contains(inside, marker) {
		t.Errorf("uploads through links did not land inside the sandbox: %q", inside)
	}
}

func errClass(err error) string {
	if err == nil {
		return "ok"
	}
	var e *errdefs.Error
	if errors.As(err, &e) {
		return e.Class.Error()
	}
	return err.Error()
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// tarOf builds a tar stream of headers (with bodies for regular files).
func tarOf(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := e.hdr
		if h.Typeflag == tar.TypeReg && h.Size == 0 {
			h.Size = int64(len(e.body))
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		h.ModTime = time.Now()
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if e.body != "" {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

type tarEntry struct {
	hdr  tar.Header
	body string
}

func reg(name, body string) tarEntry {
	return tarEntry{tar.Header{Name: name, Typeflag: tar.TypeReg}, body}
}

func itemArchive(t *testing.T, b *battery) {
	id := b.sandbox(t, api.CreateSandboxRequest{DiskMB: 256})
	ctx := context.Background()
	esc := "agentbox-escape-" + randHex(6)
	flagBase := filepath.Base(b.hostFlag)
	cases := []struct {
		name string
		tar  []byte
	}{
		{"dotdot", tarOf(t, reg("../../../../../../var/tmp/"+esc, "x"))},
		{"absolute", tarOf(t, reg("/var/tmp/"+esc, "x"))},
		{"symlink_then_write", tarOf(t,
			tarEntry{tar.Header{Name: "lnk", Typeflag: tar.TypeSymlink, Linkname: "/var/tmp"}, ""},
			reg("lnk/"+flagBase, "overwritten"), reg("lnk/"+esc, "x"))},
		{"relative_symlink_then_write", tarOf(t,
			tarEntry{tar.Header{Name: "rel", Typeflag: tar.TypeSymlink, Linkname: "../../../../../../../var/tmp"}, ""},
			reg("rel/"+flagBase, "overwritten"), reg("rel/"+esc, "x"))},
		{"hardlink_to_host", tarOf(t,
			tarEntry{tar.Header{Name: "hl", Typeflag: tar.TypeLink, Linkname: b.hostFlag}, ""},
			reg("hl", "overwritten"))},
		{"hardlink_dotdot", tarOf(t,
			tarEntry{tar.Header{Name: "hl2", Typeflag: tar.TypeLink, Linkname: "../../../../../.." + b.hostFlag}, ""})},
		{"char_device", tarOf(t, tarEntry{tar.Header{Name: "mem", Typeflag: tar.TypeChar, Devmajor: 1, Devminor: 1}, ""})},
		{"block_device", tarOf(t, tarEntry{tar.Header{Name: "sda", Typeflag: tar.TypeBlock, Devmajor: 8, Devminor: 0}, ""})},
		{"fifo", tarOf(t, tarEntry{tar.Header{Name: "fifo", Typeflag: tar.TypeFifo}, ""})},
		{"setuid", tarOf(t, tarEntry{tar.Header{Name: "suid", Typeflag: tar.TypeReg, Mode: 0o4755, Uid: 0}, "#!/bin/sh\nid -u\n"})},
		{"sparse_terabyte_header", sparseHeader(t)},
	}
	var seen []string
	for _, c := range cases {
		dir := "/root/tar-" + c.name
		if _, err := env.client.Mkdir(ctx, id, dir, 0o755); err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		err := env.client.UploadArchive(cctx, id, dir, bytes.NewReader(c.tar))
		cancel()
		seen = append(seen, c.name+"="+errClass(err))
	}
	// Host verdicts: the flag unchanged and single-linked, no escape file.
	if fi, err := os.Stat(b.hostFlag); err == nil {
		if st, ok := fi.Sys().(interface{ Nlink() uint64 }); ok && st.Nlink() != 1 {
			t.Errorf("the host flag has %d links", st.Nlink())
		}
	}
	for _, h := range []string{"/var/tmp/" + esc, "/" + esc, "/tmp/" + esc} {
		if _, err := os.Stat(h); err == nil {
			os.Remove(h)
			t.Errorf("an archive entry escaped to %s on the host", h)
		}
	}
	_ = filepath.WalkDir(env.cfg.DataDir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Name() == esc {
			// Inside a sandbox's upper dir is contained; anywhere else is not.
			if !strings.Contains(p, "/upper/") && !strings.Contains(p, "/diff/") {
				t.Logf("escape file found in the data dir at %s", p)
			}
		}
		return nil
	})
	// No device node may exist inside.
	devs := strings.TrimSpace(mustSh(t, id, "find /root \\( -type b -o -type c \\) -print | tr '\\n' ' '"))
	suid := strings.TrimSpace(mustSh(t, id, "ls -ln /root/tar-setuid 2>&1 | tail -n1"))
	evidence(t, "%s; device nodes inside: %q; setuid entry: %q", strings.Join(seen, " "), devs, suid)
	if devs != "" {
		t.Errorf("device nodes were extracted inside the sandbox: %q", devs)
	}
	// The setuid bit, if kept, gains nothing (item 25); run it as user.
	res := execReq(t, id, api.ExecRequest{Shell: "/root/tar-setuid/suid 2>/dev/null || echo not-run", User: "user"})
	if out := strings.TrimSpace(res.Stdout); out != "1000" && out != "not-run" {
		t.Errorf("an uploaded setuid script run by user 1000 printed uid %q", out)
	}
}

// sparseHeader is a tar whose single entry claims a terabyte and carries
// nothing.
func sparseHeader(t testing.TB) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "huge", Typeflag: tar.TypeReg, Size: 1 << 40, Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	// No body, no trailer: the stream ends early.
	return buf.Bytes()
}
