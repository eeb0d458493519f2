package auth

import (
	"net/http"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// The fleet gateway (docs/cluster.md) authenticates tenants itself and
// calls a node with the fleet secret as its bearer key, naming whom the
// request acts for in two headers. A node trusts those headers on a
// request that carries the fleet secret and on no other: they are read
// only once the secret matched.
const (
	// TenantHeader names the tenant a gateway's request acts for; a
	// gateway request without it acts for the admin.
	TenantHeader = "Agentbox-Tenant"
	// AdminHeader is "true" when the gateway's principal is an admin key
	// ("false" or absent otherwise).
	AdminHeader = "Agentbox-Admin"
	// GatewayKeyID is the KeyID of the principal of a gateway's request
	// (in the audit log and the request's log line); the per-key rate
	// limit does not apply to it (the gateway carries every tenant's
	// traffic).
	GatewayKeyID = "gateway"
)

// SetGatewayKey makes a request whose bearer key is secret the fleet
// gateway's (fleet.gateway_key_file). Only its hash is kept, and a
// presented key is compared by hash in constant time. Call it before
// serving.
func (a *Authenticator) SetGatewayKey(secret string) {
	a.gatewayHash = Hash(secret)
}

// isGateway reports whether hash is that of the gateway's secret; the
// request's principal is then the one its headers name (GatewayPrincipal).
func (a *Authenticator) isGateway(hash []byte) bool {
	return a.gatewayHash != nil && hashEqual(hash, a.gatewayHash)
}

// GatewayPrincipal reads the principal a gateway's request names in its
// headers: the tenant of TenantHeader (admin with AdminHeader "true"), or
// the admin when TenantHeader is absent.
func GatewayPrincipal(h http.Header) (Principal, error) {
	p := Principal{KeyID: GatewayKeyID}
	switch v := strings.TrimSpace(h.Get(AdminHeader)); v {
	case "true":
		p.Admin = true
	case "false", "":
	default:
		return Principal{}, errdefs.New(errdefs.ErrUnauthenticated, "%s must be true or false, got %q", AdminHeader, v)
	}
	tenant, named := h[http.CanonicalHeaderKey(TenantHeader)]
	if !named {
		p.Tenant, p.Admin = AdminTenant, true
		return p, nil
	}
	if len(tenant) != 1 || !tenancy.ValidName(tenant[0]) {
		return Principal{}, errdefs.New(errdefs.ErrUnauthenticated, "%s must name one tenant (1-63 lowercase letters, digits, '-' or '_'), got %q", TenantHeader, tenant)
	}
	p.Tenant = tenant[0]
	return p, nil
}

// SetGatewayHeaders writes p into h for a node: what GatewayPrincipal
// reads back.
func SetGatewayHeaders(h http.Header, p Principal) {
	h.Set(TenantHeader, p.Tenant)
	if p.Admin {
		h.Set(AdminHeader, "true")
	} else {
		h.Set(AdminHeader, "false")
	}
}
