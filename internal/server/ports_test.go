package server

import (
	"net/http/httptest"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func TestParsePreview(t *testing.T) {
	cases := []struct {
		host, path string
		ok         bool
		want       previewTarget
	}{
		{"8000-abc.localhost", "/x", true, previewTarget{id: "abc", port: 8000, hostForm: true}},
		{"8000-abc.LOCALHOST:7423", "/", true, previewTarget{id: "abc", port: 8000, hostForm: true}},
		{"8000-abc.example.test", "/", false, previewTarget{}},          // other domain
		{"x.8000-abc.localhost", "/", false, previewTarget{}},           // nested label
		{"abc.localhost", "/", false, previewTarget{}},                  // no port
		{"http-abc.localhost", "/", false, previewTarget{}},             // port not a number
		{"localhost:7423", "/v1/sandboxes/abc", false, previewTarget{}}, // the API itself
		{"localhost:7423", "/v1/sandboxes/abc/exec", false, previewTarget{}},
		{"localhost:7423", "/v1/sandboxes/abc/ports/3000", true, previewTarget{id: "abc", port: 3000, prefix: "/v1/sandboxes/abc/ports/3000"}},
		{"unix", "/v1/sandboxes/abc/ports/3000/a/b", true, previewTarget{id: "abc", port: 3000, prefix: "/v1/sandboxes/abc/ports/3000"}},
		{"unix", "/v1/sandboxes/abc/ports/http/", false, previewTarget{}},
		{"unix", "/v1/sandboxes//ports/80/", false, previewTarget{}},
	}
	for _, c := range cases {
		r := httptest.NewRequest("GET", "http://h"+c.path, nil)
		r.Host = c.host
		got, ok := parsePreview(r, "localhost")
		if ok != c.ok || got != c.want {
			t.Errorf("%s %s: got %+v %v, want %+v %v", c.host, c.path, got, ok, c.want, c.ok)
		}
	}
}

func TestStripPreviewCredentials(t *testing.T) {
	r := httptest.NewRequest("GET", "http://h/p?a=1&"+api.PreviewTokenQuery+"=secret", nil)
	r.Header.Set(api.PreviewTokenHeader, "secret")
	r.Header.Set("Authorization", "Bearer key")
	r.Header.Set("Cookie", api.PreviewTokenCookie+"=secret; app=1")
	stripPreviewCredentials(r, false)
	if r.URL.RawQuery != "a=1" || r.Header.Get(api.PreviewTokenHeader) != "" || r.Header.Get("Cookie") != "app=1" {
		t.Fatalf("after strip: query %q, headers %v", r.URL.RawQuery, r.Header)
	}
	if r.Header.Get("Authorization") == "" {
		t.Fatal("the app's Authorization header was dropped although no API key was used")
	}
	stripPreviewCredentials(r, true)
	if r.Header.Get("Authorization") != "" {
		t.Fatal("Authorization kept although it was the API key")
	}
}
