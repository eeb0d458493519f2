package api

import "time"

// API keys, tenants, quotas, the audit log and the posture check: the
// admin routes of docs/SECURITY.md.

// CreateKeyRequest is the body of POST /v1/keys (admin only).
type CreateKeyRequest struct {
	Tenant string `json:"tenant"`
	Name   string `json:"name,omitempty"`
	Admin  bool   `json:"admin,omitempty"`
}

// Key is an API key as the API shows it. Secret is set only in the answer
// to POST /v1/keys: it is shown once and never stored.
type Key struct {
	ID         string     `json:"id"`
	Secret     string     `json:"secret,omitempty"`
	Tenant     string     `json:"tenant"`
	Name       string     `json:"name"`
	Admin      bool       `json:"admin"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// ListKeysResponse is the answer to GET /v1/keys.
type ListKeysResponse struct {
	Keys []Key `json:"keys"`
}

// Quotas cap what a tenant's sandboxes hold at once; 0 means no limit.
// Sandboxes, CPU and MemoryMB count sandboxes creating, running or
// paused; DiskMB counts every sandbox not destroyed (stopped ones too).
type Quotas struct {
	Sandboxes int64   `json:"sandboxes"`
	CPU       float64 `json:"cpu"`
	MemoryMB  int64   `json:"memory_mb"`
	DiskMB    int64   `json:"disk_mb"`
	// Pids caps the sum of the pids limits of the tenant's sandboxes that
	// are creating, running or paused (0: no limit).
	Pids int64 `json:"pids"`
}

// Tenant is a tenant with its quotas and what it uses now.
type Tenant struct {
	Name      string    `json:"name"`
	Quotas    Quotas    `json:"quotas"`
	Usage     Quotas    `json:"usage"`
	CreatedAt time.Time `json:"created_at"`
}

// CreateTenantRequest is the body of POST /v1/tenants.
type CreateTenantRequest struct {
	Name   string  `json:"name"`
	Quotas *Quotas `json:"quotas,omitempty"`
}

// UpdateTenantRequest is the body of PATCH /v1/tenants/{name}: the quotas
// it names replace the current ones; omitted ones are kept.
type UpdateTenantRequest struct {
	Quotas *QuotasPatch `json:"quotas,omitempty"`
}

// QuotasPatch is a partial Quotas.
type QuotasPatch struct {
	Sandboxes *int64   `json:"sandboxes,omitempty"`
	CPU       *float64 `json:"cpu,omitempty"`
	MemoryMB  *int64   `json:"memory_mb,omitempty"`
	DiskMB    *int64   `json:"disk_mb,omitempty"`
	Pids      *int64   `json:"pids,omitempty"`
}

// ListTenantsResponse is the answer to GET /v1/tenants.
type ListTenantsResponse struct {
	Tenants []Tenant `json:"tenants"`
}

// AuditEntry is one state-changing API call.
type AuditEntry struct {
	ID        int64     `json:"id"`
	Time      time.Time `json:"time"`
	KeyID     string    `json:"key_id"`
	Tenant    string    `json:"tenant"`
	Method    string    `json:"method"`
	Path      string    `json:"path"`
	SandboxID string    `json:"sandbox_id,omitempty"`
	Status    int       `json:"status"`
	Remote    string    `json:"remote,omitempty"`
}

// ListAuditResponse is the answer to GET /v1/audit.
type ListAuditResponse struct {
	Entries []AuditEntry `json:"entries"`
}

// SecurityReport is the host-side posture check of one sandbox's
// processes (GET /v1/sandboxes/{id}/security, admin only).
type SecurityReport struct {
	Sandbox   string           `json:"sandbox"`
	Pass      bool             `json:"pass"`
	Processes []ProcessPosture `json:"processes"`
}

// ProcessPosture is what the host sees of one sandbox process.
type ProcessPosture struct {
	Pid    int          `json:"pid"`
	Comm   string       `json:"comm"`
	Pass   bool         `json:"pass"`
	Checks []CheckValue `json:"checks"`
}

// CheckValue is one check of one process: its name, the value seen, what
// was wanted and whether it passed.
type CheckValue struct {
	Name string `json:"name"`
	Got  string `json:"got"`
	Want string `json:"want"`
	Pass bool   `json:"pass"`
}
