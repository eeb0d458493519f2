package api

import "time"

// IDAlphabet is the alphabet of sandbox and snapshot ids and of node ids:
// lowercase RFC 4648 base32, so that an id is a DNS label, a hostname and
// a cgroup name as it is.
const IDAlphabet = "abcdefghijklmnopqrstuvwxyz234567"

// NodeIDLen is the length of a node id (config node_id); a node's ids are
// its node id and IDRandLen random characters.
const NodeIDLen = 3

// IDRandLen is the number of random characters of a sandbox or snapshot
// id (60 bits).
const IDRandLen = 12

// NodeOfID returns the node id a sandbox or snapshot id starts with: ok
// only for an id of NodeIDLen+IDRandLen characters of IDAlphabet, the
// ids of a daemon with a node_id (docs/cluster.md). An id of IDRandLen
// characters (a daemon without node_id) names no node.
func NodeOfID(id string) (node string, ok bool) {
	if len(id) != NodeIDLen+IDRandLen || !InIDAlphabet(id) {
		return "", false
	}
	return id[:NodeIDLen], true
}

// InIDAlphabet reports whether s is non-empty and made of IDAlphabet's
// characters only.
func InIDAlphabet(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

// NodeStatus is the body of GET /v1/node (admin only): what a fleet
// gateway reads of a node every poll_interval to place sandboxes
// (docs/cluster.md).
type NodeStatus struct {
	// NodeID is the daemon's node_id ("" when it has none).
	NodeID  string `json:"node_id"`
	Version string `json:"version"`
	// Tiers are the isolation tiers, as GET /v1/info shows them.
	Tiers []Tier `json:"tiers"`
	// Sandboxes is the number of sandboxes with a running init.
	Sandboxes int `json:"sandboxes"`
	// CPUs is the host's CPU count; Load1 its 1-minute load average.
	CPUs  int     `json:"cpus"`
	Load1 float64 `json:"load1"`
	// MemoryTotalMB and MemoryAvailableMB are the host's MemTotal and
	// MemAvailable (/proc/meminfo).
	MemoryTotalMB     int64 `json:"memory_total_mb"`
	MemoryAvailableMB int64 `json:"memory_available_mb"`
	// Templates are the names of the templates ready on this node.
	Templates []string `json:"templates"`
	// Draining is reserved: a draining node takes no new sandboxes. Always
	// false for now.
	Draining bool `json:"draining"`
}

// FleetNode is one node of a gateway's membership table (GET
// /v1/fleet/nodes).
type FleetNode struct {
	ID  string `json:"id"`
	URL string `json:"url"`
	// Source is where the gateway learned of the node: "config" (a
	// [[fleet.node]]) or "kubernetes" (an AgentboxNode object).
	Source string `json:"source,omitempty"`
	// Lease, for a node from Kubernetes: "" while its Lease is renewed,
	// else why the gateway holds it down (expired, missing).
	Lease string `json:"lease,omitempty"`
	// Available: the last poll succeeded and no request has failed to
	// connect since; only available nodes get new sandboxes.
	Available bool `json:"available"`
	// LastError is why the last poll or connection failed ("" after a
	// success).
	LastError string `json:"last_error,omitempty"`
	// LastPoll is when the node was last polled; nil before the first.
	LastPoll *time.Time `json:"last_poll,omitempty"`
	// InFlight is the number of creates the gateway has sent the node
	// that have not answered yet.
	InFlight int `json:"in_flight"`
	// LostSandboxes, on a node that is unavailable, is the number of
	// sandboxes it ran at its last successful poll: out of reach until it
	// is back (a node restarted recovers its running sandboxes); 0 on an
	// available node.
	LostSandboxes int `json:"lost_sandboxes,omitempty"`
	// Status is the node's last GET /v1/node answer; nil before the
	// first success.
	Status *NodeStatus `json:"status,omitempty"`
}

// ListFleetNodesResponse is the body of GET /v1/fleet/nodes.
type ListFleetNodesResponse struct {
	Nodes []FleetNode `json:"nodes"`
}

// FleetSummary is what GET /v1/info of a gateway says of its nodes.
type FleetSummary struct {
	Total     int `json:"total"`
	Available int `json:"available"`
}
