package auth

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// gatewayHeaders builds the headers of a fuzzed gateway request: the admin
// header as given (absent when adminSet is false) and 0, 1 or 2 tenant
// header values (tenants%3), so that absent, one and repeated headers are
// all reached.
func gatewayHeaders(admin string, adminSet bool, tenants uint8, t1, t2 string) http.Header {
	h := http.Header{}
	if adminSet {
		h[AdminHeader] = []string{admin}
	}
	switch tenants % 3 {
	case 1:
		h[TenantHeader] = []string{t1}
	case 2:
		h[TenantHeader] = []string{t1, t2}
	}
	return h
}

// FuzzGatewayPrincipal: the headers a fleet gateway names its principal
// with (Agentbox-Tenant, Agentbox-Admin) decode to exactly what they say
// or are refused as unauthenticated, never to the admin by accident; and
// they mean nothing on a request that does not carry the fleet secret: a
// tenant's key stays that tenant's, and an unknown key is refused, whatever
// the headers say.
func FuzzGatewayPrincipal(f *testing.F) {
	st, _ := openStore(f)
	a := New(st, "/nonexistent/admin.key", nil)
	const fleetSecret = "fleet-secret-of-at-least-32-characters!"
	a.SetGatewayKey(fleetSecret)
	ctx := context.Background()
	tenantKey, _, err := CreateKey(ctx, st, "acme", "ci", false)
	if err != nil {
		f.Fatal(err)
	}

	f.Add("", false, uint8(0), "", "", uint8(0))
	f.Add("true", true, uint8(1), "acme", "", uint8(0))
	f.Add("false", true, uint8(1), "other", "", uint8(1))
	f.Add(" true ", true, uint8(0), "", "", uint8(0))
	f.Add("TRUE", true, uint8(1), "Acme", "", uint8(0))
	f.Add("true", true, uint8(2), "acme", "default", uint8(1))
	f.Add("", true, uint8(1), "", "", uint8(2))
	f.Add("true", true, uint8(1), "default", "", uint8(2))
	f.Fuzz(func(t *testing.T, admin string, adminSet bool, tenants uint8, t1, t2 string, key uint8) {
		h := gatewayHeaders(admin, adminSet, tenants, t1, t2)
		p, err := GatewayPrincipal(h)
		if err != nil {
			if !errors.Is(err, errdefs.ErrUnauthenticated) {
				t.Fatalf("GatewayPrincipal(%v): %v, not unauthenticated", h, err)
			}
			if p != (Principal{}) {
				t.Fatalf("GatewayPrincipal(%v) refused but returned %+v", h, p)
			}
		} else {
			if p.KeyID != GatewayKeyID {
				t.Fatalf("GatewayPrincipal(%v): key id %q", h, p.KeyID)
			}
			wantAdmin := strings.TrimSpace(admin) == "true" && adminSet
			switch tenants % 3 {
			case 0:
				if p.Tenant != AdminTenant || !p.Admin {
					t.Fatalf("no tenant header: %+v, want the admin", p)
				}
			case 1:
				if p.Tenant != t1 || !tenancy.ValidName(t1) || p.Admin != wantAdmin {
					t.Fatalf("GatewayPrincipal(%v) = %+v", h, p)
				}
			default:
				t.Fatalf("two tenant headers accepted: %v -> %+v", h, p)
			}
			// What the gateway writes for p reads back as p.
			back := http.Header{}
			SetGatewayHeaders(back, p)
			if q, err := GatewayPrincipal(back); err != nil || q != p {
				t.Fatalf("round trip of %+v: %+v, %v", p, q, err)
			}
		}

		// The same headers through Authenticate, with each kind of key.
		r, _ := http.NewRequest("GET", "/v1/sandboxes", nil)
		r.Header = h.Clone()
		switch key % 3 {
		case 0: // the fleet secret: the headers decide
			r.Header.Set("Authorization", "Bearer "+fleetSecret)
			got, gerr := a.Authenticate(ctx, r)
			if (gerr == nil) != (err == nil) || got != p {
				t.Fatalf("Authenticate with the fleet secret and %v: %+v, %v; GatewayPrincipal: %+v, %v", h, got, gerr, p, err)
			}
		case 1: // a tenant's key: the headers are ignored
			r.Header.Set("Authorization", "Bearer "+tenantKey)
			got, gerr := a.Authenticate(ctx, r)
			if gerr != nil || got.Tenant != "acme" || got.Admin || got.KeyID == GatewayKeyID {
				t.Fatalf("Authenticate with acme's key and %v: %+v, %v", h, got, gerr)
			}
		default: // a key nobody holds, made of the fuzzed tenant value
			r.Header.Set("Authorization", "Bearer "+t1)
			if got, gerr := a.Authenticate(ctx, r); gerr == nil && strings.TrimSpace(t1) != fleetSecret && strings.TrimSpace(t1) != tenantKey {
				t.Fatalf("Authenticate with key %q and %v: %+v, accepted", t1, h, got)
			}
		}
	})
}
