package e2b

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

func TestParseMetadata(t *testing.T) {
	for _, c := range []struct {
		in   string // the query value as net/url decoded it
		want map[string]string
	}{
		{"", nil},
		{"k=v", map[string]string{"k": "v"}},
		{"a=1&b=2", map[string]string{"a": "1", "b": "2"}},
		// {"a b":"x&y=z"} as the JS SDK encodes it, once decoded by net/url.
		{"a%2520b%3Dx%2526y%253Dz", map[string]string{"a b": "x&y=z"}},
	} {
		got, err := parseMetadata(c.in)
		if err != nil || !reflect.DeepEqual(got, c.want) {
			t.Errorf("parseMetadata(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
	if _, err := parseMetadata("novalue"); err == nil {
		t.Error("parseMetadata(novalue) accepted a pair without =")
	}
}

func envelope(flags byte, msg string) []byte {
	b := []byte{flags, 0, 0, 0, 0}
	binary.BigEndian.PutUint32(b[1:], uint32(len(msg)))
	return append(b, msg...)
}

func TestReadStreamRequest(t *testing.T) {
	r := httptest.NewRequest("POST", "/process.Process/Start", bytes.NewReader(envelope(0, `{"process":{"cmd":"/bin/bash","args":["-l","-c","echo hi"]},"stdin":false}`)))
	var in startRequest
	if e := readStreamRequest(r, &in); e != nil {
		t.Fatal(e)
	}
	if in.Process.Cmd != "/bin/bash" || len(in.Process.Args) != 3 || in.Stdin == nil || *in.Stdin {
		t.Errorf("decoded %+v", in)
	}
	for name, body := range map[string][]byte{
		"compressed": envelope(flagCompressed, `{}`),
		"short":      envelope(0, `{}`)[:6],
		"not json":   envelope(0, `{`),
		"too large":  {0, 0xff, 0xff, 0xff, 0xff},
	} {
		r := httptest.NewRequest("POST", "/x", bytes.NewReader(body))
		if e := readStreamRequest(r, &in); e == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func FuzzReadStreamRequest(f *testing.F) {
	f.Add(envelope(0, `{"process":{"cmd":"ls"}}`))
	f.Add(envelope(flagCompressed, `{}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var in startRequest
		_ = readStreamRequest(httptest.NewRequest("POST", "/x", bytes.NewReader(body)), &in)
	})
}

// TestStreamFraming: messages, then exactly one end-of-stream envelope,
// the error in it; nothing after.
func TestStreamFraming(t *testing.T) {
	rec := httptest.NewRecorder()
	s := newStream(rec)
	if err := s.send(eventMessage{processEvent{Start: &startEvent{Pid: 7}}}); err != nil {
		t.Fatal(err)
	}
	s.end(&connectError{Code: "deadline_exceeded", Message: "late"})
	s.end(nil)
	if s.send(struct{}{}) == nil {
		t.Error("a send after the end succeeded")
	}
	if got := rec.Header().Get("Content-Type"); got != "application/connect+json" || rec.Code != 200 {
		t.Errorf("status %d, type %q", rec.Code, got)
	}
	b := rec.Body.Bytes()
	var got []string
	for len(b) >= 5 {
		n := binary.BigEndian.Uint32(b[1:5])
		got = append(got, string(rune('0'+b[0]))+string(b[5:5+n]))
		b = b[5+n:]
	}
	want := []string{`0{"event":{"start":{"pid":7}}}`, `2{"error":{"code":"deadline_exceeded","message":"late"}}`}
	if !reflect.DeepEqual(got, want) || len(b) != 0 {
		t.Errorf("envelopes %q (+%d bytes), want %q", got, len(b), want)
	}
}

func TestEndOf(t *testing.T) {
	zero, three := 0, 3
	for _, c := range []struct {
		exit api.ExecEvent
		want string
	}{
		{api.ExecEvent{ExitCode: &zero}, `{"exitCode":0,"exited":true,"status":"exit status 0"}`},
		{api.ExecEvent{ExitCode: &three}, `{"exitCode":3,"exited":true,"status":"exit status 3","error":"exit status 3"}`},
		{api.ExecEvent{Signal: "SIGKILL"}, `{"exitCode":-1,"exited":false,"status":"signal: killed","error":"signal: killed"}`},
		{api.ExecEvent{Signal: "SIGTERM"}, `{"exitCode":-1,"exited":false,"status":"signal: term","error":"signal: term"}`},
	} {
		b, _ := json.Marshal(endOf(&c.exit))
		if string(b) != c.want {
			t.Errorf("endOf(%+v) = %s, want %s", c.exit, b, c.want)
		}
	}
}

func TestEntryOf(t *testing.T) {
	mt := time.Date(2026, 1, 2, 3, 4, 5, 500_000_000, time.FixedZone("x", 3600))
	e := entryOf(&api.FileInfo{Name: "d", Path: "/tmp/d", Type: api.FileTypeDir, Size: 4096, Mode: "0755", ModTime: mt, UID: 1000})
	b, _ := json.Marshal(e)
	want := `{"name":"d","type":"FILE_TYPE_DIRECTORY","path":"/tmp/d","size":"4096","mode":2147484141,"permissions":"drwxr-xr-x","owner":"1000","group":"root","modifiedTime":"2026-01-02T02:04:05.5Z"}`
	if string(b) != want {
		t.Errorf("entryOf = %s\nwant      %s", b, want)
	}
	l := entryOf(&api.FileInfo{Path: "/tmp/l", Type: api.FileTypeSymlink, Mode: "0777", Target: "/etc"})
	if l.Name != "l" || l.Type != "FILE_TYPE_SYMLINK" || l.SymlinkTarget == nil || *l.SymlinkTarget != "/etc" || l.Permissions != "Lrwxrwxrwx" {
		t.Errorf("symlink entry %+v", l)
	}
}

func TestBasicUser(t *testing.T) {
	for h, want := range map[string]string{"": "", "Basic cm9vdDo=": "root", "basic dXNlcjo=": "user", "Bearer x": "", "Basic !!": ""} {
		r := httptest.NewRequest("POST", "/", nil)
		r.Header.Set("Authorization", h)
		if got := basicUser(r); got != want {
			t.Errorf("basicUser(%q) = %q, want %q", h, got, want)
		}
	}
}

// TestUnsupported: what is not supported answers in the shape the SDK
// reads for that part of the protocol, and says so.
func TestUnsupported(t *testing.T) {
	h := New(Options{})
	for _, c := range []struct {
		method, path string
		header       map[string]string
		status       int
		body         string
	}{
		{"GET", "/e2b/volumes", nil, 501, `"code":501`},
		{"POST", "/e2b/filesystem.Filesystem/CreateWatcher", map[string]string{"E2b-Sandbox-Id": "x"}, 501, `"code":"unimplemented"`},
		{"GET", "/e2b/metrics", map[string]string{"E2b-Sandbox-Id": "x"}, 501, `"code":501`},
		{"GET", "/e2b/health", map[string]string{"E2b-Sandbox-Id": "x", "E2b-Sandbox-Port": "8080"}, 501, "port 8080"},
	} {
		r := httptest.NewRequest(c.method, c.path, nil)
		for k, v := range c.header {
			r.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.Serve(rec, r, nil)
		if rec.Code != c.status || !strings.Contains(rec.Body.String(), c.body) || !strings.HasPrefix(rec.Header().Get("Content-Type"), "application/json") {
			t.Errorf("%s %s: %d %s, want %d with %s", c.method, c.path, rec.Code, rec.Body, c.status, c.body)
		}
	}
	rec := httptest.NewRecorder()
	r := httptest.NewRequest("POST", "/e2b/process.Process/List", nil)
	r.Header.Set("E2b-Sandbox-Id", "x")
	Unauthenticated(rec, r, "invalid API key")
	if rec.Code != http.StatusUnauthorized || !strings.Contains(rec.Body.String(), `"code":"unauthenticated"`) {
		t.Errorf("unauthenticated RPC: %d %s", rec.Code, rec.Body)
	}
}

func TestTemplate(t *testing.T) {
	h := New(Options{TemplateAliases: map[string]string{"code-interpreter-v1": "python", "secure": "base@gvisor"}})
	for id, want := range map[string][2]string{
		"base":                {"base", ""},
		"base@gvisor":         {"base", "gvisor"},
		"code-interpreter-v1": {"python", ""},
		"secure":              {"base", "gvisor"},
		// An alias with a tier of its own: the tier named wins.
		"code-interpreter-v1@gvisor": {"python", "gvisor"},
		"secure@container":           {"base", "container"},
	} {
		if tpl, iso := h.template(id); tpl != want[0] || iso != want[1] {
			t.Errorf("template(%q) = %q, %q; want %q, %q", id, tpl, iso, want[0], want[1])
		}
	}
}

func TestEgressOf(t *testing.T) {
	no, yes := false, true
	for _, c := range []struct {
		internet    *bool
		allow, deny []string
		want        api.Network
	}{
		{nil, nil, nil, api.Network{Egress: api.EgressInternet}},
		{&yes, nil, []string{"203.0.113.0/24"}, api.Network{Egress: api.EgressInternet, Deny: []string{"203.0.113.0/24"}}},
		{nil, []string{"198.51.100.7"}, nil, api.Network{Egress: api.EgressInternet}},
		{nil, []string{"198.51.100.7"}, []string{"0.0.0.0/0"}, api.Network{Egress: api.EgressCustom, Allow: []string{"198.51.100.7"}}},
		{&no, nil, nil, api.Network{Egress: api.EgressNone}},
		{&no, []string{"example.org"}, []string{"192.0.2.1"}, api.Network{Egress: api.EgressCustom, Allow: []string{"example.org"}, Deny: []string{"192.0.2.1"}}},
		{nil, nil, []string{"::/0", "0.0.0.0/0"}, api.Network{Egress: api.EgressNone}},
	} {
		got := egressOf(c.internet, c.allow, c.deny)
		if !reflect.DeepEqual(got, c.want) {
			t.Errorf("egressOf(%v, %v, %v) = %+v, want %+v", c.internet, c.allow, c.deny, got, c.want)
		}
	}
}

func TestPasswdHome(t *testing.T) {
	db := []byte("root:x:0:0:root:/root:/bin/bash\r\n# comment\nshort:x:5\nuser:x:1000:1000::/home/user/:/bin/bash\nnohome:x:1001:1001:::/bin/sh\n")
	for _, c := range []struct {
		name, home string
		ok         bool
	}{
		{"root", "/root", true},
		{"user", "/home/user", true},
		{"nohome", "/", true},
		{"short", "", false},
		{"nobody", "", false},
		{"", "", false},
	} {
		home, ok := passwdHome(db, c.name)
		if home != c.home || ok != c.ok {
			t.Errorf("passwdHome(%q) = %q, %v; want %q, %v", c.name, home, ok, c.home, c.ok)
		}
	}
}

func TestDecodedBody(t *testing.T) {
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	zw.Write([]byte("hello"))
	zw.Close()
	for _, c := range []struct {
		enc, body, want string
		bad             bool
	}{
		{"", "plain", "plain", false},
		{"identity", "plain", "plain", false},
		{"GZIP", zb.String(), "hello", false},
		{"gzip", "not gzip", "", true},
		{"br", "x", "", true},
	} {
		r := httptest.NewRequest("POST", "/files?path=/tmp/a", strings.NewReader(c.body))
		if c.enc != "" {
			r.Header.Set("Content-Encoding", c.enc)
		}
		body, err := decodedBody(r)
		if c.bad {
			if err == nil {
				t.Errorf("%s: accepted %q", c.enc, c.body)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", c.enc, err)
		}
		got, err := io.ReadAll(body)
		if err != nil || string(got) != c.want {
			t.Errorf("%s: read %q, %v; want %q", c.enc, got, err, c.want)
		}
	}
}
