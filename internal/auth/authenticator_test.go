package auth

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/store"
)

func TestAuthenticate(t *testing.T) {
	ctx := context.Background()
	st, _ := openStore(t)
	a := New(st, "/var/lib/agentbox/admin.key", nil)
	admin, adminRec, err := CreateKey(ctx, st, "default", "admin", true)
	if err != nil {
		t.Fatal(err)
	}
	user, userRec, err := CreateKey(ctx, st, "acme", "ci", false)
	if err != nil {
		t.Fatal(err)
	}
	unknown, _ := NewKey()

	tests := []struct {
		name    string
		header  string // "" sends no header
		want    Principal
		wantErr string
	}{
		{"admin", "Bearer " + admin, Principal{KeyID: adminRec.ID, Tenant: "default", Admin: true}, ""},
		{"tenant", "Bearer " + user, Principal{KeyID: userRec.ID, Tenant: "acme"}, ""},
		{"scheme case-insensitive", "bearer " + user, Principal{KeyID: userRec.ID, Tenant: "acme"}, ""},
		{"no header", "", Principal{}, `missing API key: send "Authorization: Bearer <key>"; the admin key is in /var/lib/agentbox/admin.key`},
		{"basic auth", "Basic dXNlcjpwYXNz", Principal{}, `unsupported Authorization header`},
		{"bare secret", user, Principal{}, `unsupported Authorization header`},
		{"empty bearer", "Bearer ", Principal{}, "invalid API key"},
		{"unknown key", "Bearer " + unknown, Principal{}, "invalid API key"},
		{"truncated key", "Bearer " + user[:len(user)-1], Principal{}, "invalid API key"},
		{"hash instead of key", "Bearer abx_" + strings.Repeat("0", 40), Principal{}, "invalid API key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := httptest.NewRequest("GET", "/v1/sandboxes", nil)
			if tt.header != "" {
				r.Header.Set("Authorization", tt.header)
			}
			got, err := a.Authenticate(ctx, r)
			if tt.wantErr != "" {
				if err == nil || err.Error() != tt.wantErr && !strings.HasPrefix(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				if !errors.Is(err, errdefs.ErrUnauthenticated) {
					t.Errorf("err %v is not ErrUnauthenticated", err)
				}
				if got != (Principal{}) {
					t.Errorf("principal %+v returned with an error", got)
				}
				if strings.Contains(err.Error(), strings.TrimPrefix(tt.header, "Bearer ")) && tt.header != "" && tt.header != "Bearer " {
					t.Errorf("error %q echoes the credential", err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, tt.want)
			}
		})
	}

	// Use is recorded.
	keys, _ := st.ListKeys(ctx, "acme")
	if keys[0].LastUsedAt == nil {
		t.Error("LastUsedAt not set after a successful request")
	}

	// Revocation takes effect on the next request.
	if err := st.RevokeKey(ctx, userRec.ID); err != nil {
		t.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+user)
	if _, err := a.Authenticate(ctx, r); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("revoked key = %v, want ErrUnauthenticated", err)
	}

	// So does a tenant's deletion, for a key that was just remembered.
	if err := st.CreateTenant(ctx, &store.TenantRecord{Name: "beta"}); err != nil {
		t.Fatal(err)
	}
	beta, _, err := CreateKey(ctx, st, "beta", "ci", false)
	if err != nil {
		t.Fatal(err)
	}
	r.Header.Set("Authorization", "Bearer "+beta)
	for range 2 {
		if _, err := a.Authenticate(ctx, r); err != nil {
			t.Fatalf("beta's key: %v", err)
		}
	}
	if _, ok := a.remembered(Hash(beta), st.KeysVersion()); !ok {
		t.Error("a valid key is not remembered")
	}
	if err := st.DeleteTenant(ctx, "beta"); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Authenticate(ctx, r); !errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("key of a deleted tenant = %v, want ErrUnauthenticated", err)
	}

	// A store failure is not reported as a bad key.
	st.Close()
	r.Header.Set("Authorization", "Bearer "+admin)
	if _, err := a.Authenticate(ctx, r); err == nil || errors.Is(err, errdefs.ErrUnauthenticated) {
		t.Errorf("closed store = %v, want a non-401 error", err)
	}
}

func TestPrincipalContext(t *testing.T) {
	if _, ok := FromContext(context.Background()); ok {
		t.Error("FromContext on empty context reported a principal")
	}
	p := Principal{KeyID: "key_1", Tenant: "t", Admin: true}
	got, ok := FromContext(WithPrincipal(context.Background(), p))
	if !ok || got != p {
		t.Errorf("FromContext = %+v, %v; want %+v", got, ok, p)
	}
}

// BenchmarkAuthenticate measures a whole check (parse, sha256, then the
// indexed lookup for a key not remembered, a map lookup for one that is).
func BenchmarkAuthenticate(b *testing.B) {
	ctx := context.Background()
	st, _ := openStore(b)
	for i := 0; i < 200; i++ {
		if _, _, err := CreateKey(ctx, st, "t", "", false); err != nil {
			b.Fatal(err)
		}
	}
	secret, _, err := CreateKey(ctx, st, "t", "", false)
	if err != nil {
		b.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Set("Authorization", "Bearer "+secret)
	for _, remembered := range []bool{false, true} {
		name := "lookup"
		if remembered {
			name = "remembered"
		}
		b.Run(name, func(b *testing.B) {
			a := New(st, "/x", nil)
			for b.Loop() {
				if !remembered {
					a = New(st, "/x", nil)
				}
				if _, err := a.Authenticate(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
