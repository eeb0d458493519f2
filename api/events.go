package api

import "time"

// Event is one lifecycle event of GET /v1/events (Server-Sent Events:
// each event's data line is this JSON and its id is Seq). Type is one of
// created, forked, paused, resumed, stopped, snapshotted, reset, expired,
// destroyed, oom, failed and quota_rejected; see docs/observability.md.
type Event struct {
	// Seq grows by one per event the daemon published since it started.
	Seq       uint64    `json:"seq"`
	Time      time.Time `json:"time"`
	Type      string    `json:"type"`
	Sandbox   string    `json:"sandbox,omitempty"`
	Tenant    string    `json:"tenant,omitempty"`
	Template  string    `json:"template,omitempty"`
	Isolation string    `json:"isolation,omitempty"`
	// Detail says more: the parent of a fork, the snapshot's id, why it
	// failed, which quota refused.
	Detail string `json:"detail,omitempty"`
}
