package api

// Info is the body of GET /v1/info: what this daemon offers and how it is
// set up. Any valid key may read it; the host paths are for admins only.
type Info struct {
	Version string `json:"version"`
	// Tiers are the isolation tiers this build knows, each with whether it
	// runs on this host and, when not, why.
	Tiers            []Tier `json:"tiers"`
	DefaultIsolation string `json:"default_isolation"`
	DefaultTemplate  string `json:"default_template"`
	// Defaults fill what a create leaves unset; Limits are the most a
	// request may ask for (TTLSeconds 0: no limit, a sandbox may then
	// have no TTL).
	Defaults InfoLimits `json:"defaults"`
	Limits   InfoLimits `json:"limits"`
	// Sandboxes is the number of sandboxes with a running init.
	Sandboxes int `json:"sandboxes"`
	// Admin keys only: where the daemon keeps its state, listens and logs.
	DataDir string `json:"data_dir,omitempty"`
	RunDir  string `json:"run_dir,omitempty"`
	Socket  string `json:"socket,omitempty"`
	Listen  string `json:"listen,omitempty"`
	Log     string `json:"log,omitempty"`
	// Role is "gateway" for a fleet gateway (docs/cluster.md), absent
	// for a node; NodeID is a node's node_id.
	Role   string `json:"role,omitempty"`
	NodeID string `json:"node_id,omitempty"`
	// Nodes, on a gateway, sums up its membership (GET /v1/fleet/nodes
	// has the table).
	Nodes *FleetSummary `json:"nodes,omitempty"`
}

// Tier is one isolation tier in Info.
type Tier struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Default   bool   `json:"default,omitempty"`
	// Error says why an unavailable tier does not run here.
	Error string `json:"error,omitempty"`
}

// InfoLimits are the defaults or the limits of a sandbox's resources.
type InfoLimits struct {
	TTLSeconds int64   `json:"ttl_seconds"`
	CPU        float64 `json:"cpu"`
	MemoryMB   int64   `json:"memory_mb"`
	DiskMB     int64   `json:"disk_mb"`
	Pids       int64   `json:"pids"`
}
