package registry

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ggcrregistry "github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/random"

	"github.com/agentbox/agentbox/internal/config"
)

// TestPlainHTTPOnlyWhenListed pushes to a plain-HTTP registry on
// loopback: refused (with what to configure) unless its host is in
// insecure, then it works and pulls back.
func TestPlainHTTPOnlyWhenListed(t *testing.T) {
	srv := httptest.NewServer(ggcrregistry.New())
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	img, err := random.Image(1024, 1)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := ParseRef(host + "/agentbox/x:1")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := New(config.Registry{}).Write(ctx, ref, img); err == nil || !strings.Contains(err.Error(), "[registry] insecure") {
		t.Fatalf("push over plain HTTP to an unlisted loopback registry: %v", err)
	}
	for _, list := range [][]string{{host}, {"127.0.0.1"}} {
		c := New(config.Registry{Insecure: list})
		d, err := c.Write(ctx, ref, img)
		if err != nil {
			t.Fatalf("insecure %v: %v", list, err)
		}
		got, err := c.Image(ctx, ref, nil)
		if err != nil {
			t.Fatal(err)
		}
		if gd, _ := got.Digest(); gd != d {
			t.Errorf("pulled %s, pushed %s", gd, d)
		}
	}
}

// TestAuthFile reads credentials from a docker-style config.json, and
// an unreadable one fails without its contents in the error.
func TestAuthFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(`{"auths": {"https://reg.example:5000": {"auth": "dXNlcjpzM2NyZXQ="}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ref, _ := ParseRef("reg.example:5000/a/b:1")
	a, err := keychain{file: file}.Resolve(ref.Context())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := a.Authorization()
	if err != nil || cfg.Username != "user" || cfg.Password != "s3cret" {
		t.Errorf("credentials: %+v %v", cfg, err)
	}
	other, _ := ParseRef("other.example/a/b:1")
	if a, _ := (keychain{file: file}).Resolve(other.Context()); a == nil {
		t.Error("no authenticator for another registry")
	}
	if err := os.WriteFile(file, []byte(`{"auths": s3cret`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := (keychain{file: file}).Resolve(ref.Context()); err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("a bad auth file: %v", err)
	}
}

// TestParseRef wants the registry host.
func TestParseRef(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:5000/a/b:1", "localhost/a", "reg.example/a/b@sha256:" + strings.Repeat("a", 64)} {
		if _, err := ParseRef(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "busybox", "library/busybox:1", "a/b", "127.0.0.1:5000/", "127.0.0.1:5000/A:1"} {
		if _, err := ParseRef(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	r, _ := ParseRef("127.0.0.1:5000/agentbox/templates/app")
	if RepoName(r) != "app" || r.Identifier() != "latest" {
		t.Errorf("RepoName %q, tag %q", RepoName(r), r.Identifier())
	}
}
