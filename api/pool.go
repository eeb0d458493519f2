package api

// PoolStatus is one warm pool (GET /v1/pools): sandboxes of one template,
// tier, limits and egress booted ahead of time and handed out on create.
// See docs/PERFORMANCE.md, "Warm pools".
type PoolStatus struct {
	// Node, through a fleet gateway, is the node that keeps the pool
	// (every node keeps its own pools).
	Node      string    `json:"node,omitempty"`
	Template  string    `json:"template"`
	Isolation string    `json:"isolation"`
	Size      int       `json:"size"`  // how many it keeps ready
	Ready     int       `json:"ready"` // ready now
	Resources Resources `json:"resources"`
	Egress    string    `json:"egress"` // "none" or "internet"
	// Code is the language whose kernel each ready sandbox has started
	// as its default code context ("" for none).
	Code string `json:"code,omitempty"`
	// Desktop says each ready sandbox has its display running.
	Desktop bool `json:"desktop,omitempty"`
	// Served counts creates answered from the pool, Misses creates that
	// matched it while it was empty, Booted the sandboxes it has made and
	// Failures its failed boots, since the daemon started.
	Served    int64  `json:"served"`
	Misses    int64  `json:"misses"`
	Booted    int64  `json:"booted"`
	Failures  int64  `json:"failures"`
	LastError string `json:"last_error,omitempty"`
}

// ListPoolsResponse is the body of GET /v1/pools.
type ListPoolsResponse struct {
	Pools []PoolStatus `json:"pools"`
}
