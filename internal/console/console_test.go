package console

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHandler(t *testing.T) {
	h := Handler()
	cases := []struct {
		method, path string
		status       int
		ctype        string
	}{
		{"GET", "/console/", 200, "text/html; charset=utf-8"},
		{"HEAD", "/console/", 200, "text/html; charset=utf-8"},
		{"GET", "/console/app.js", 200, "text/javascript; charset=utf-8"},
		{"GET", "/console/app.css", 200, "text/css; charset=utf-8"},
		{"GET", "/console", 301, ""},
		{"GET", "/console/nothing.js", 404, ""},
		{"GET", "/console/../console.go", 404, ""},
		{"GET", "/console/xterm/../README.md", 404, ""},
		{"POST", "/console/", 405, ""},
	}
	for _, c := range cases {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(c.method, c.path, nil))
		if w.Code != c.status {
			t.Errorf("%s %s: %d, want %d", c.method, c.path, w.Code, c.status)
		}
		if c.ctype != "" && w.Header().Get("Content-Type") != c.ctype {
			t.Errorf("%s %s: Content-Type %q, want %q", c.method, c.path, w.Header().Get("Content-Type"), c.ctype)
		}
		// Every answer, errors included, carries the policy.
		if got := w.Header().Get("Content-Security-Policy"); got != CSP {
			t.Errorf("%s %s: Content-Security-Policy %q, want %q", c.method, c.path, got, CSP)
		}
		if w.Header().Get("X-Content-Type-Options") != "nosniff" || w.Header().Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s %s: headers %v", c.method, c.path, w.Header())
		}
	}
}

// TestCSPIsStrict: scripts only from the console's own files (no inline,
// no eval), calls only to the daemon, no framing.
func TestCSPIsStrict(t *testing.T) {
	dirs := map[string]string{}
	for _, d := range strings.Split(CSP, ";") {
		f := strings.Fields(d)
		dirs[f[0]] = strings.Join(f[1:], " ")
	}
	for dir, want := range map[string]string{
		"default-src":     "'none'",
		"script-src":      "'self'",
		"connect-src":     "'self'",
		"frame-ancestors": "'none'",
		"base-uri":        "'none'",
		"form-action":     "'none'",
	} {
		if dirs[dir] != want {
			t.Errorf("%s is %q, want %q", dir, dirs[dir], want)
		}
	}
	if strings.Contains(CSP, "unsafe-eval") || strings.Contains(dirs["script-src"], "unsafe-inline") {
		t.Errorf("CSP allows inline script or eval: %s", CSP)
	}
}

// TestShellHasNoInlineScript: the page itself obeys the policy.
func TestShellHasNoInlineScript(t *testing.T) {
	b, err := staticFS.ReadFile("static/index.html")
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if strings.Count(page, "<script") != strings.Count(page, `<script type="module" src=`) {
		t.Errorf("index.html has a script without src")
	}
	for _, attr := range []string{" onclick=", " onload=", " style=", "javascript:"} {
		if strings.Contains(page, attr) {
			t.Errorf("index.html has %q, which the CSP blocks", attr)
		}
	}
	js, _ := staticFS.ReadFile("static/app.js")
	for _, bad := range []string{"innerHTML", "eval(", "new Function", "localStorage"} {
		if strings.Contains(string(js), bad) {
			t.Errorf("app.js uses %s", bad)
		}
	}
}

func TestMatch(t *testing.T) {
	for path, want := range map[string]bool{"/console": true, "/console/": true, "/console/app.js": true, "/consoles": false, "/v1/console": false} {
		if got := Match(httptest.NewRequest(http.MethodGet, path, nil)); got != want {
			t.Errorf("Match(%s) = %v, want %v", path, got, want)
		}
	}
}
