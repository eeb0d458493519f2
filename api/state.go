package api

import "time"

// What a sandbox's TTL does when it runs out (CreateSandboxRequest.OnTimeout).
const (
	OnTimeoutDestroy = "destroy"
	OnTimeoutPause   = "pause"
)

// Snapshot is an immutable capture of a sandbox's files, usable to create
// sandboxes exactly as a template is.
type Snapshot struct {
	ID string `json:"id"`
	// Node is the node_id of the daemon that holds the snapshot, the
	// first three characters of its id ("" without node_id).
	Node            string    `json:"node,omitempty"`
	Name            string    `json:"name,omitempty"`
	SandboxID       string    `json:"sandbox_id"` // the source sandbox
	Template        string    `json:"template"`
	TemplateVersion string    `json:"template_version"`
	Parent          string    `json:"parent,omitempty"` // the snapshot the source started from
	SizeBytes       int64     `json:"size_bytes"`
	CreatedAt       time.Time `json:"created_at"`
	// Internal snapshots are made by fork and removed with their last
	// dependent.
	Internal bool `json:"internal,omitempty"`
	// Memory: the snapshot holds the source's processes and memory too
	// (gvisor tier); a sandbox created from it goes on running them.
	Memory bool `json:"memory,omitempty"`
}

// CreateSnapshotRequest is the body of POST /v1/sandboxes/{id}/snapshots.
type CreateSnapshotRequest struct {
	Name string `json:"name,omitempty"`
	// Memory also captures the sandbox's processes and memory (a runsc
	// checkpoint); only tiers with memory snapshots (gvisor) can.
	Memory bool `json:"memory,omitempty"`
}

// PauseRequest is the optional body of POST /v1/sandboxes/{id}/pause.
type PauseRequest struct {
	// ToDisk checkpoints the sandbox's processes and memory to disk and
	// stops it: no host memory is used, and it survives daemon restarts
	// and host reboots; resume restores it where it was. gvisor tier only.
	ToDisk bool `json:"to_disk,omitempty"`
}

// ListSnapshotsResponse is the body of GET /v1/snapshots.
type ListSnapshotsResponse struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// ForkRequest is the body of POST /v1/sandboxes/{id}/fork.
type ForkRequest struct {
	Count int `json:"count,omitempty"` // default 1
	// Memory: each child goes on running the parent's processes, their
	// memory included (gvisor tier); without, children start fresh on
	// the parent's files.
	Memory bool `json:"memory,omitempty"`
	// Spread, through a fleet gateway (docs/cluster.md, the cross-host
	// fork), places each child on the best of a few nodes, not only the
	// parent's: the parent's files go to the other nodes as a snapshot
	// streamed from node to node (and pushed to the fleet's registry, when
	// it has one, afterwards). With Memory (gvisor) the snapshot carries
	// the parent's processes, restored in every child wherever it is (a
	// microvm parent keeps every child on its node). A node alone
	// ignores it (every child is on the node).
	Spread bool `json:"spread,omitempty"`
}

// ForkResponse is the body of a fork's answer: the children, in order.
type ForkResponse struct {
	Sandboxes []Sandbox `json:"sandboxes"`
}

// ResetRequest is the body of POST /v1/sandboxes/{id}/reset.
type ResetRequest struct {
	// Snapshot (id or name) to reset to; empty: where the sandbox
	// started (its template, or the snapshot it was created from).
	Snapshot string `json:"snapshot,omitempty"`
	// Template: back to the sandbox's template, leaving the snapshot it
	// was created from or last reset to. Not with Snapshot.
	Template bool `json:"template,omitempty"`
}
