package files

import (
	"bytes"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fuzzRoutes are the guest protocol's /files routes, picked by the fuzz
// input's first byte.
var fuzzRoutes = []struct{ method, path string }{
	{"GET", "/files"}, {"PUT", "/files"}, {"DELETE", "/files"},
	{"GET", "/files/stat"}, {"GET", "/files/list"},
	{"POST", "/files/mkdir"}, {"POST", "/files/rename"},
	{"GET", "/files/archive"}, {"PUT", "/files/archive"},
}

// FuzzGuestFiles sends arbitrary requests (route, query string, body) to
// the guest's real /files handlers over a sandbox root that holds symlinks
// aimed out of it, with a "host" around it (a flag file and an
// etc/shadow beside the root). Whatever the request: the handler answers
// (no panic) with a status of its own classes, never a 500; nothing
// outside the root is created, changed or removed, nor read back to the
// client; the root itself stays; no device, fifo or socket appears.
func FuzzGuestFiles(f *testing.F) {
	add := func(route int, query, body string) { f.Add(byte(route), query, []byte(body)) }
	add(0, "path=/etc/shadow", "")
	add(0, "path=/up/flag", "")
	add(0, "path=/abs/shadow&offset=1&length=3", "")
	add(1, "path=/up/flag&mode=4755", "PWNED")
	add(1, "path=/new/deep/file&user=user&mode=0600", "data")
	add(2, "path=/up&recursive=true", "")
	add(2, "path=/&recursive=true", "")
	add(3, "path=/proc/self/root", "")
	add(4, "path=/&depth=10", "")
	add(5, "", `{"path":"/up/made","mode":"0755"}`)
	add(6, "", `{"from":"/etc","to":"/up/etc"}`)
	add(6, "", `{"from":"/","to":"/x"}`)
	add(7, "path=/up", "")
	add(8, "path=/", "not a tar")
	f.Fuzz(func(t *testing.T, route byte, query string, body []byte) {
		if os.Geteuid() != 0 {
			t.Fatal("FuzzGuestFiles needs root: the file API sets owners with chown")
		}
		rt := fuzzRoutes[int(route)%len(fuzzRoutes)]
		outer := t.TempDir()
		root := filepath.Join(outer, "root")
		for _, d := range []string{"etc", "home/user", "tmp", "outside-ish"} {
			mustMkdir(t, filepath.Join(root, d))
		}
		mustWrite(t, filepath.Join(root, "etc/passwd"), testPasswd)
		mustWrite(t, filepath.Join(root, "etc/shadow"), "sandbox-shadow")
		mustWrite(t, filepath.Join(outer, "flag"), "HOST-FLAG")
		mustMkdir(t, filepath.Join(outer, "etc"))
		mustWrite(t, filepath.Join(outer, "etc/shadow"), "HOST-SHADOW")
		for link, target := range map[string]string{"up": "..", "abs": "/etc", "upup": "../../..", "self": "/proc/self/root"} {
			if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
				t.Fatal(err)
			}
		}
		before := snapshotOutside(t, outer)

		mux := http.NewServeMux()
		Register(mux, Options{Root: root, MaxArchiveBytes: 1 << 20, MaxArchiveEntries: 100})
		req, err := http.NewRequest(rt.method, "http://guest"+rt.path+"?"+query, bytes.NewReader(body))
		if err != nil {
			return // not a request a client can send
		}
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, req)

		switch code := w.Code; {
		case code == 500:
			t.Fatalf("%s %s?%q: 500 %s", rt.method, rt.path, query, w.Body.String())
		case code < 200 || code > 507:
			t.Fatalf("%s %s?%q: status %d", rt.method, rt.path, query, code)
		}
		if out := w.Body.String(); strings.Contains(out, "HOST-") {
			t.Fatalf("%s %s?%q answered the host's data: %.200q", rt.method, rt.path, query, out)
		}
		if after := snapshotOutside(t, outer); after != before {
			t.Fatalf("%s %s?%q changed what is outside the root:\nbefore %s\nafter  %s", rt.method, rt.path, query, before, after)
		}
		if fi, err := os.Lstat(root); err != nil || !fi.IsDir() {
			t.Fatalf("%s %s?%q removed or replaced the root: %v", rt.method, rt.path, query, err)
		}
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type()&(fs.ModeDevice|fs.ModeCharDevice|fs.ModeNamedPipe|fs.ModeSocket) != 0 {
				t.Errorf("special file %s made by %s %s?%q", p, rt.method, rt.path, query)
			}
			return nil
		})
	})
}

// snapshotOutside describes everything under outer except the root: names,
// modes, owners and contents.
func snapshotOutside(t *testing.T, outer string) string {
	var b strings.Builder
	filepath.WalkDir(outer, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			b.WriteString(p + " error\n")
			return nil
		}
		if p == filepath.Join(outer, "root") {
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
