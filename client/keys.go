package client

import (
	"context"
	"net/url"
	"strconv"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// API keys, tenants, the audit log and the posture check: admin only.

// CreateKey makes an API key for tenant; the answer holds its secret,
// which the daemon never shows again.
func (c *Client) CreateKey(ctx context.Context, req api.CreateKeyRequest) (*api.Key, error) {
	var k api.Key
	if err := c.doJSON(ctx, "POST", "/v1/keys", nil, req, &k); err != nil {
		return nil, err
	}
	return &k, nil
}

// ListKeys lists API keys (without secrets), of tenant or of all ("").
func (c *Client) ListKeys(ctx context.Context, tenant string) ([]api.Key, error) {
	q := url.Values{}
	if tenant != "" {
		q.Set("tenant", tenant)
	}
	var out api.ListKeysResponse
	if err := c.doJSON(ctx, "GET", "/v1/keys", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Keys, nil
}

// RevokeKey revokes an API key by id; its next request fails.
func (c *Client) RevokeKey(ctx context.Context, id string) error {
	if id == "" {
		return errdefs.Invalid("a key id is required")
	}
	return c.doJSON(ctx, "DELETE", "/v1/keys/"+url.PathEscape(id), nil, nil, nil)
}

// CreateTenant makes a tenant with quotas (nil: no limits).
func (c *Client) CreateTenant(ctx context.Context, req api.CreateTenantRequest) (*api.Tenant, error) {
	var t api.Tenant
	if err := c.doJSON(ctx, "POST", "/v1/tenants", nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// ListTenants lists tenants with their quotas and usage.
func (c *Client) ListTenants(ctx context.Context) ([]api.Tenant, error) {
	var out api.ListTenantsResponse
	if err := c.doJSON(ctx, "GET", "/v1/tenants", nil, nil, &out); err != nil {
		return nil, err
	}
	return out.Tenants, nil
}

// GetTenant returns one tenant with its quotas and usage.
func (c *Client) GetTenant(ctx context.Context, name string) (*api.Tenant, error) {
	if name == "" {
		return nil, errdefs.Invalid("a tenant name is required")
	}
	var t api.Tenant
	if err := c.doJSON(ctx, "GET", "/v1/tenants/"+url.PathEscape(name), nil, nil, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// UpdateTenant changes a tenant's quotas; fields left nil are kept.
func (c *Client) UpdateTenant(ctx context.Context, name string, req api.UpdateTenantRequest) (*api.Tenant, error) {
	if name == "" {
		return nil, errdefs.Invalid("a tenant name is required")
	}
	var t api.Tenant
	if err := c.doJSON(ctx, "PATCH", "/v1/tenants/"+url.PathEscape(name), nil, req, &t); err != nil {
		return nil, err
	}
	return &t, nil
}

// DeleteTenant removes a tenant without sandboxes and revokes its keys.
func (c *Client) DeleteTenant(ctx context.Context, name string) error {
	if name == "" {
		return errdefs.Invalid("a tenant name is required")
	}
	return c.doJSON(ctx, "DELETE", "/v1/tenants/"+url.PathEscape(name), nil, nil, nil)
}

// Audit returns the newest limit entries of the audit log (0: the
// daemon's default of 100), newest first.
func (c *Client) Audit(ctx context.Context, limit int) ([]api.AuditEntry, error) {
	q := url.Values{}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out api.ListAuditResponse
	if err := c.doJSON(ctx, "GET", "/v1/audit", q, nil, &out); err != nil {
		return nil, err
	}
	return out.Entries, nil
}

// SandboxSecurity runs the host-side posture check of a sandbox.
func (c *Client) SandboxSecurity(ctx context.Context, id string) (*api.SecurityReport, error) {
	if id == "" {
		return nil, errdefs.Invalid("a sandbox id is required")
	}
	var rep api.SecurityReport
	if err := c.doJSON(ctx, "GET", "/v1/sandboxes/"+url.PathEscape(id)+"/security", nil, nil, &rep); err != nil {
		return nil, err
	}
	return &rep, nil
}
