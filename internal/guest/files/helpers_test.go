package files

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func requiresRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the file API sets owners with chown")
	}
}

// env is a sandbox root inside an outer directory that plays the host:
// files in outer but outside root must never be read or written.
type env struct {
	t     *testing.T
	outer string
	root  string
	srv   *httptest.Server
}

const testPasswd = "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"

func newEnv(t *testing.T, opts Options) *env {
	t.Helper()
	requiresRoot(t)
	outer := t.TempDir()
	root := filepath.Join(outer, "root")
	mustMkdir(t, filepath.Join(root, "etc"))
	mustWrite(t, filepath.Join(root, "etc/passwd"), testPasswd)
	mustWrite(t, filepath.Join(root, "etc/shadow"), "sandbox-shadow")
	// The "host": a flag next to the root and a host-like /etc.
	mustMkdir(t, filepath.Join(outer, "etc"))
	mustWrite(t, filepath.Join(outer, "etc/shadow"), "HOST-SHADOW")
	mustWrite(t, filepath.Join(outer, "flag"), "HOST-FLAG")
	opts.Root = root
	mux := http.NewServeMux()
	Register(mux, opts)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return &env{t: t, outer: outer, root: root, srv: srv}
}

func mustMkdir(t *testing.T, p string) {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, p, s string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(p))
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (e *env) host(p string) string { return filepath.Join(e.root, p) }

// do sends a request; query is appended as is (already escaped).
func (e *env) do(method, route, query string, body io.Reader, hdr ...string) *http.Response {
	e.t.Helper()
	req, err := http.NewRequest(method, e.srv.URL+route+"?"+query, body)
	if err != nil {
		e.t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := e.srv.Client().Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { resp.Body.Close() })
	return resp
}

func q(kv ...string) string {
	v := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		v.Set(kv[i], kv[i+1])
	}
	return v.Encode()
}

func (e *env) put(p string, data []byte, extra ...string) *http.Response {
	e.t.Helper()
	return e.do("PUT", "/files", q(append([]string{"path", p}, extra...)...), bytes.NewReader(data))
}

func (e *env) get(p string) *http.Response {
	e.t.Helper()
	return e.do("GET", "/files", q("path", p), nil)
}

func (e *env) postJSON(route string, v any) *http.Response {
	e.t.Helper()
	b, _ := json.Marshal(v)
	return e.do("POST", route, "", bytes.NewReader(b))
}

// expect checks the status and, for errors, the code and a message part;
// it returns the body.
func expect(t *testing.T, resp *http.Response, status int, msgPart string) []byte {
	t.Helper()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading body: %v", err)
	}
	if resp.StatusCode != status {
		t.Fatalf("status = %d, want %d; body %s", resp.StatusCode, status, body)
	}
	if status >= 400 {
		var eb api.ErrorBody
		if err := json.Unmarshal(body, &eb); err != nil || eb.Error.Code == "" {
			t.Fatalf("error body %q is not an api.ErrorBody", body)
		}
		if !strings.Contains(eb.Error.Message, msgPart) {
			t.Fatalf("error message %q does not contain %q", eb.Error.Message, msgPart)
		}
	}
	return body
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	return v
}

// checkHostUntouched fails if the "host" files next to the root changed or
// anything new appeared next to the root.
func (e *env) checkHostUntouched() {
	e.t.Helper()
	for p, want := range map[string]string{"etc/shadow": "HOST-SHADOW", "flag": "HOST-FLAG"} {
		got, err := os.ReadFile(filepath.Join(e.outer, p))
		if err != nil || string(got) != want {
			e.t.Errorf("host file %s = %q, %v; want %q", p, got, err, want)
		}
	}
	ents, _ := os.ReadDir(e.outer)
	for _, d := range ents {
		if n := d.Name(); n != "root" && n != "etc" && n != "flag" {
			e.t.Errorf("a file appeared outside the root: %s", n)
		}
	}
	ents, _ = os.ReadDir(filepath.Join(e.outer, "etc"))
	if len(ents) != 1 {
		e.t.Errorf("host etc has %d entries, want 1", len(ents))
	}
}
