package files

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
)

// SECURITY.md item 28: bad paths are refused with 400 and write nothing.
func TestHostilePaths(t *testing.T) {
	e := newEnv(t, Options{})
	tests := []struct {
		name, rawQuery, want string
	}{
		{"dotdot", "path=/../flag", "not clean"},
		{"dotdot deep", "path=/a/../../../../flag", "not clean"},
		{"relative", "path=../flag", "not absolute"},
		{"relative plain", "path=flag", "not absolute"},
		{"double slash", "path=//flag", "not clean"},
		{"NUL", "path=/x%00/../../flag", "NUL byte"},
		{"huge name", "path=/" + strings.Repeat("n", 300), "300 bytes long"},
		{"huge path", "path=" + strings.Repeat("/abcdefgh", 500), "the limit is 4096"},
		{"missing", "", "path is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, route := range []struct{ method, path string }{
				{"PUT", "/files"}, {"GET", "/files"}, {"DELETE", "/files"}, {"GET", "/files/stat"},
				{"GET", "/files/list"}, {"GET", "/files/archive"}, {"PUT", "/files/archive"},
			} {
				resp := e.do(route.method, route.path, tt.rawQuery, strings.NewReader("PWNED"))
				expect(t, resp, http.StatusBadRequest, tt.want)
			}
		})
	}
	e.checkHostUntouched()
}

// SECURITY.md item 29: symlinks resolve inside the root.
func TestHostileSymlinks(t *testing.T) {
	e := newEnv(t, Options{})
	mustMkdir(t, e.host("tmp"))
	links := map[string]string{
		"tmp/abs":     "/etc/shadow",
		"tmp/rel":     "../../../../../../etc/shadow",
		"tmp/flag":    "../../flag", // outer/flag from the host's view
		"tmp/slash":   "/",
		"tmp/up":      "../../..",
		"tmp/hostabs": e.outer + "/etc/shadow", // a host absolute path
	}
	for name, target := range links {
		if err := os.Symlink(target, e.host(name)); err != nil {
			t.Fatal(err)
		}
	}
	t.Run("link to /etc/shadow reads the root's own", func(t *testing.T) {
		for _, p := range []string{"/tmp/abs", "/tmp/rel"} {
			if got := expect(t, e.get(p), 200, ""); string(got) != "sandbox-shadow" {
				t.Errorf("GET %s = %q, want the sandbox's own shadow", p, got)
			}
		}
	})
	t.Run("links out of the root do not reach host files", func(t *testing.T) {
		expect(t, e.get("/tmp/flag"), 404, "")
		expect(t, e.get("/tmp/hostabs"), 404, "")
		expect(t, e.do("GET", "/files/archive", q("path", "/tmp/up"), nil), 200, "") // the root itself
	})
	t.Run("uploads through links stay inside", func(t *testing.T) {
		expect(t, e.put("/tmp/slash/etc/evil", []byte("x")), 200, "")
		if _, err := os.Stat(e.host("etc/evil")); err != nil {
			t.Errorf("upload through link to / did not land in the root: %v", err)
		}
		expect(t, e.put("/tmp/up/flag", []byte("PWNED")), 200, "")
		expect(t, e.put("/tmp/flag", []byte("PWNED")), 200, "") // dangling inside: creates /flag in root
		expect(t, e.put("/tmp/up/etc/shadow", []byte("PWNED")), 200, "")
		expect(t, e.postJSON("/files/mkdir", map[string]string{"path": "/tmp/up/newdir"}), 200, "")
		if got, _ := os.ReadFile(e.host("flag")); string(got) != "PWNED" {
			t.Errorf("root's /flag = %q", got)
		}
	})
	t.Run("delete and rename of a link act on the link", func(t *testing.T) {
		expect(t, e.do("DELETE", "/files", q("path", "/tmp/abs"), nil), http.StatusNoContent, "")
		if _, err := os.Stat(e.host("etc/shadow")); err != nil {
			t.Errorf("deleting a link removed its target")
		}
	})
	e.checkHostUntouched()
}

// Magic links are refused; this needs the real /proc, so the root is "/"
// and only reads are tried.
func TestMagicLinksRefused(t *testing.T) {
	mux := http.NewServeMux()
	Register(mux, Options{Root: "/"})
	srv := httptest.NewServer(mux)
	defer srv.Close()
	f, err := os.Open("/etc/hostname")
	if err != nil {
		t.Skip(err)
	}
	defer f.Close()
	fdPath := "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
	for _, p := range []string{
		"/proc/self/root/etc/hostname",
		"/proc/self/cwd",
		"/proc/self/exe",
		fdPath,
	} {
		t.Run(p, func(t *testing.T) {
			for _, route := range []string{"/files", "/files/list", "/files/archive"} {
				resp, err := srv.Client().Get(srv.URL + route + "?" + q("path", p))
				if err != nil {
					t.Fatal(err)
				}
				expect(t, resp, http.StatusBadRequest, "magic link")
				resp.Body.Close()
			}
		})
	}
	// stat does not follow the last component: a magic link is just a link.
	resp, err := srv.Client().Get(srv.URL + "/files/stat?" + q("path", "/proc/self/exe"))
	if err != nil {
		t.Fatal(err)
	}
	expect(t, resp, 200, "")
	resp.Body.Close()
}
