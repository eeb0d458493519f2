package api

import "time"

// EgressLogEntry is one decision about a sandbox's outbound traffic: a
// DNS query its resolver answered or refused, or a connection its
// SNI/Host proxy let through or closed. See docs/network.md.
type EgressLogEntry struct {
	Time time.Time `json:"time"`
	// Kind is "dns" (a query to the sandbox's resolver) or "connect" (a
	// TCP connection to a web port checked by the proxy).
	Kind string `json:"kind"`
	// Proto is "udp" or "tcp".
	Proto string `json:"proto"`
	// Dest is the destination ip:port: the original destination of a
	// connection, the sandbox's resolver for a query.
	Dest string `json:"dest"`
	// Name is the queried name, or the TLS SNI / HTTP Host of a
	// connection ("" when it sent none).
	Name string `json:"name,omitempty"`
	// QType is a query's type ("A", "TXT"...).
	QType string `json:"qtype,omitempty"`
	// Verdict is "allow" or "deny".
	Verdict string `json:"verdict"`
	// Reason names the rule or check that decided ("allow *.example.com",
	// "no allow rule names it", "address not resolved for an allowed
	// name").
	Reason string `json:"reason"`
	// Answers are the IPv4 addresses an allowed A query resolved to (each
	// now allowed for its TTL).
	Answers []string `json:"answers,omitempty"`
}

// EgressLog is the answer of GET /v1/sandboxes/{id}/egress/log: the
// sandbox's most recent decisions, oldest first, and how many older ones
// were dropped to keep it bounded.
type EgressLog struct {
	Entries []EgressLogEntry `json:"entries"`
	Dropped int64            `json:"dropped"`
}

// Egress log verdicts and kinds.
const (
	VerdictAllow      = "allow"
	VerdictDeny       = "deny"
	EgressKindDNS     = "dns"
	EgressKindConnect = "connect"
)
