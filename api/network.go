package api

// Network is a sandbox's network settings: its egress policy and who may
// reach its preview URLs. It is the `network` field of a create request
// and of a sandbox; see docs/network.md.
type Network struct {
	// Egress is EgressNone (default: loopback only), EgressInternet or
	// EgressCustom (the allow and deny lists).
	Egress string `json:"egress,omitempty"`
	// Allow and Deny are rules: a domain ("example.org", "*.example.com"), a
	// CIDR or address ("10.0.0.0/8"), or either with a port (":443",
	// "example.org:443"). Deny wins over allow.
	Allow []string `json:"allow,omitempty"`
	Deny  []string `json:"deny,omitempty"`
	// Preview is PreviewToken (default) or PreviewPublic.
	Preview string `json:"preview,omitempty"`
	// PreviewToken is chosen by the daemon at create and shown to the
	// sandbox's owner; a create request must leave it empty.
	PreviewToken string `json:"preview_token,omitempty"`
	// PreviewDomain is the host suffix of the preview URLs,
	// "localhost:7423" for http://<port>-<id>.localhost:7423/. Set by the
	// daemon.
	PreviewDomain string `json:"preview_domain,omitempty"`
	// Address is the sandbox's IPv4 address with its prefix length
	// ("10.200.0.2/30") while it has egress internet or custom; the host
	// end of its veth is the first address of that /30. Set by the daemon.
	Address string `json:"address,omitempty"`
	// MaxConnections limits the connections the sandbox has open at once
	// through its egress (TCP and UDP flows); one more is refused. In a
	// request 0 (or leaving it out) takes the daemon's default ([network]
	// max_connections) and -1 asks for no limit; a sandbox shows the limit
	// applied, -1 for none. Egress internet or custom only.
	MaxConnections int `json:"max_connections,omitempty"`
	// BandwidthMbit limits the sandbox's traffic in each direction, in
	// megabits per second; 0 and -1 as for MaxConnections ([network]
	// bandwidth_mbit).
	BandwidthMbit int `json:"bandwidth_mbit,omitempty"`
}

// Egress policies.
const (
	EgressNone     = "none"
	EgressInternet = "internet"
	EgressCustom   = "custom"
)

// Preview access modes.
const (
	PreviewTokenMode = "token"
	PreviewPublic    = "public"
)

// The preview token travels in this header, this query parameter, or
// (after a first request that carried it in the query) this cookie.
const (
	PreviewTokenHeader = "X-Agentbox-Token"
	PreviewTokenQuery  = "agentbox_token"
	PreviewTokenCookie = "agentbox_token"
)
