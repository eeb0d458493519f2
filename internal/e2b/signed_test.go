package e2b

import (
	"net/http/httptest"
	"net/url"
	"strconv"
	"testing"
	"time"
)

// signedURL builds a /files URL signed as the JS SDK signs it (an absent
// user is signed as "undefined").
func signedURL(path, op, user, token string, exp int64) string {
	q := url.Values{"path": {path}}
	signed := user
	if user != "" {
		q.Set("username", user)
	} else {
		signed = "undefined"
	}
	e := ""
	if exp != 0 {
		e = strconv.FormatInt(exp, 10)
		q.Set("signature_expiration", e)
	}
	q.Set("signature", "v1_"+signature(path, op, signed, token, e))
	return "/files?" + q.Encode()
}

func TestSignedURLs(t *testing.T) {
	var s signers
	now := time.Unix(1_800_000_000, 0)
	s.remember("sb1", "key-a")
	s.remember("sb1", "key-b")
	s.remember("sb1", "key-b")
	if got := len(s.m["sb1"]); got != 2 {
		t.Fatalf("remembered %d keys, want 2", got)
	}
	cases := []struct {
		name, method, url, id, want string
	}{
		{"read", "GET", signedURL("/tmp/a", "read", "", "key-b", 0), "sb1", "key-b"},
		{"write as a user", "POST", signedURL("/tmp/a", "write", "root", "key-a", 0), "sb1", "key-a"},
		{"unexpired", "GET", signedURL("/tmp/a", "read", "", "key-a", now.Unix()+60), "sb1", "key-a"},
		{"expired", "GET", signedURL("/tmp/a", "read", "", "key-a", now.Unix()-1), "sb1", ""},
		{"read signature used to write", "POST", signedURL("/tmp/a", "read", "", "key-a", 0), "sb1", ""},
		{"unknown key", "GET", signedURL("/tmp/a", "read", "", "key-c", 0), "sb1", ""},
		{"another sandbox", "GET", signedURL("/tmp/a", "read", "", "key-a", 0), "sb2", ""},
		{"no signature", "GET", "/files?path=/tmp/a", "sb1", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := httptest.NewRequest(c.method, c.url, nil)
			if got := s.signer(r, c.id, now); got != c.want {
				t.Errorf("signer = %q, want %q", got, c.want)
			}
		})
	}
	// Another path than the signed one fails.
	r := httptest.NewRequest("GET", signedURL("/tmp/a", "read", "", "key-a", 0), nil)
	q := r.URL.Query()
	q.Set("path", "/etc/shadow")
	r.URL.RawQuery = q.Encode()
	if got := s.signer(r, "sb1", now); got != "" {
		t.Errorf("a signature used for another path: signer = %q", got)
	}
	s.forget("sb1")
	if got := s.signer(httptest.NewRequest("GET", signedURL("/tmp/a", "read", "", "key-a", 0), nil), "sb1", now); got != "" {
		t.Errorf("after forget: signer = %q", got)
	}
	for i := 0; i < maxSigners+3; i++ {
		s.remember("sb3", "k"+strconv.Itoa(i))
	}
	if got := len(s.m["sb3"]); got != maxSigners {
		t.Errorf("remembered %d keys of one sandbox, want at most %d", got, maxSigners)
	}
}

func TestCredential(t *testing.T) {
	h := New(Options{})
	h.signed.remember("sb1", "key-a")
	r := httptest.NewRequest("GET", Prefix+signedURL("/tmp/a", "read", "", "key-a", 0), nil)
	if got := h.Credential(r); got != "" {
		t.Errorf("a signed URL without E2b-Sandbox-Id: %q", got)
	}
	r.Header.Set("E2b-Sandbox-Id", "sb1")
	if got := h.Credential(r); got != "key-a" {
		t.Errorf("a signed URL: %q, want key-a", got)
	}
	r.Header.Set("X-Access-Token", "key-z")
	if got := h.Credential(r); got != "key-z" {
		t.Errorf("a token beside a signature: %q, want the token", got)
	}
}
