package auth

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func openStore(t testing.TB) (*store.Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := store.Open(context.Background(), filepath.Join(dir, "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st, dir
}

var secretRE = regexp.MustCompile(`^abx_[0-9A-Za-z]{40}$`)

func TestNewKey(t *testing.T) {
	seen := map[string]bool{}
	counts := map[rune]int{}
	const n = 2000
	for i := 0; i < n; i++ {
		s, h := NewKey()
		if !secretRE.MatchString(s) {
			t.Fatalf("secret %q does not match %v", s, secretRE)
		}
		if !wellFormed(s) {
			t.Fatalf("wellFormed(%q) = false", s)
		}
		if string(h) != string(Hash(s)) || len(h) != 32 {
			t.Fatalf("hash of %q is not its sha256", s)
		}
		if seen[s] {
			t.Fatalf("duplicate secret %q", s)
		}
		seen[s] = true
		for _, c := range s[4:] {
			counts[c]++
		}
	}
	// 80000 characters over 62 symbols: about 1290 each. A biased
	// generator (say, c%62 without rejection) would over-weight the first
	// 8 symbols by about 3%; this only catches gross mistakes, such as a
	// missing range of characters.
	if len(counts) != 62 {
		t.Errorf("only %d distinct characters used, want 62", len(counts))
	}
	for c, k := range counts {
		if k < 1000 || k > 1600 {
			t.Errorf("character %q appeared %d times, want about 1290", c, k)
		}
	}
}

func TestWellFormed(t *testing.T) {
	good, _ := NewKey()
	tests := []struct {
		in   string
		want bool
	}{
		{good, true},
		{"", false},
		{"abx_", false},
		{good[:len(good)-1], false},
		{good + "x", false},
		{"ABX_" + good[4:], false},
		{"abx_" + strings.Repeat("-", 40), false},
		{"abx_" + strings.Repeat("a", 39) + "\x00", false},
		{"abx_" + strings.Repeat("é", 20), false},
	}
	for _, tt := range tests {
		if got := wellFormed(tt.in); got != tt.want {
			t.Errorf("wellFormed(%q) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

func TestNewKeyID(t *testing.T) {
	re := regexp.MustCompile(`^key_[0-9a-f]{12}$`)
	a, b := NewKeyID(), NewKeyID()
	if !re.MatchString(a) || a == b {
		t.Errorf("NewKeyID = %q, %q", a, b)
	}
}

func TestCreateKey(t *testing.T) {
	ctx := context.Background()
	st, _ := openStore(t)
	secret, rec, err := CreateKey(ctx, st, "acme", "ci", false)
	if err != nil {
		t.Fatal(err)
	}
	got, err := st.KeyByHash(ctx, Hash(secret))
	if err != nil || got.ID != rec.ID || got.Tenant != "acme" || got.Name != "ci" || got.Admin {
		t.Errorf("stored key = %+v, %v; want %+v", got, err, rec)
	}
	if _, _, err := CreateKey(ctx, st, "", "x", false); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("CreateKey without tenant = %v, want ErrInvalidArgument", err)
	}
}

func TestEnsureAdminKey(t *testing.T) {
	ctx := context.Background()
	st, dir := openStore(t)
	path := filepath.Join(dir, AdminKeyFile)

	// Even with a permissive umask the file must come out 0600.
	old := syscall.Umask(0)
	secret, created, err := EnsureAdminKey(ctx, st, dir)
	syscall.Umask(old)
	if err != nil || !created || !secretRE.MatchString(secret) {
		t.Fatalf("first start = %q, %v, %v; want a new secret", secret, created, err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("admin.key mode %v, want 0600", fi.Mode().Perm())
	}
	data, _ := os.ReadFile(path)
	if strings.TrimSpace(string(data)) != secret {
		t.Errorf("admin.key holds %q, want %q", data, secret)
	}
	k, err := st.KeyByHash(ctx, Hash(secret))
	if err != nil || !k.Admin || k.Tenant != AdminTenant {
		t.Fatalf("stored admin key = %+v, %v", k, err)
	}
	if matches, _ := filepath.Glob(filepath.Join(dir, ".admin.key.*")); len(matches) != 0 {
		t.Errorf("temporary files left behind: %v", matches)
	}

	// Later starts read it back.
	again, created, err := EnsureAdminKey(ctx, st, dir)
	if err != nil || created || again != secret {
		t.Errorf("second start = %q, %v, %v; want the same secret, not created", again, created, err)
	}

	// A file others can read is tightened.
	os.Chmod(path, 0o644)
	if _, _, err := EnsureAdminKey(ctx, st, dir); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after start = %v, want 0600", fi.Mode().Perm())
	}

	// The file is gone but an admin key exists: no second admin key.
	os.Remove(path)
	got, created, err := EnsureAdminKey(ctx, st, dir)
	if err != nil || created || got != "" {
		t.Errorf("missing file = %q, %v, %v; want \"\", false, nil", got, created, err)
	}
	if keys, _ := st.ListKeys(ctx, ""); len(keys) != 1 {
		t.Errorf("%d keys after restart without file, want 1", len(keys))
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("admin.key recreated without a key to put in it: %v", err)
	}

	// Every admin key revoked: a new one is made and replaces the file.
	if err := os.WriteFile(path, []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.RevokeKey(ctx, k.ID); err != nil {
		t.Fatal(err)
	}
	fresh, created, err := EnsureAdminKey(ctx, st, dir)
	if err != nil || !created || fresh == secret || !secretRE.MatchString(fresh) {
		t.Fatalf("after revocation = %q, %v, %v; want a new secret", fresh, created, err)
	}
	if data, _ := os.ReadFile(path); strings.TrimSpace(string(data)) != fresh {
		t.Errorf("admin.key not replaced: %q", data)
	}
}

func TestEnsureAdminKeyStaleFile(t *testing.T) {
	tests := []struct {
		name    string
		content string
	}{
		{"empty", ""},
		{"garbage", "hello\n"},
		{"unknown key from an older install", func() string { s, _ := NewKey(); return s }()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx := context.Background()
			st, dir := openStore(t)
			path := filepath.Join(dir, AdminKeyFile)
			os.WriteFile(path, []byte(tt.content), 0o600)
			secret, created, err := EnsureAdminKey(ctx, st, dir)
			if err != nil || !created || secret == strings.TrimSpace(tt.content) {
				t.Fatalf("got %q, %v, %v; want a new key", secret, created, err)
			}
			if _, err := st.KeyByHash(ctx, Hash(secret)); err != nil {
				t.Errorf("new key not stored: %v", err)
			}
		})
	}
	t.Run("non-admin key in file", func(t *testing.T) {
		ctx := context.Background()
		st, dir := openStore(t)
		user, _, err := CreateKey(ctx, st, "acme", "", false)
		if err != nil {
			t.Fatal(err)
		}
		os.WriteFile(filepath.Join(dir, AdminKeyFile), []byte(user), 0o600)
		secret, created, err := EnsureAdminKey(ctx, st, dir)
		if err != nil || !created || secret == user {
			t.Fatalf("got %q, %v, %v; want a new admin key", secret, created, err)
		}
	})
	t.Run("directory in the way", func(t *testing.T) {
		st, dir := openStore(t)
		os.Mkdir(filepath.Join(dir, AdminKeyFile), 0o700)
		if _, _, err := EnsureAdminKey(context.Background(), st, dir); err == nil {
			t.Fatal("EnsureAdminKey with a directory at admin.key succeeded")
		}
	})
}
