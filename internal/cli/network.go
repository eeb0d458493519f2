package cli

import (
	"github.com/spf13/pflag"

	"github.com/agentbox/agentbox/api"
)

// netFlags are create's network flags (docs/network.md).
type netFlags struct {
	egress  string
	allow   []string
	deny    []string
	preview string
	// Limits (limits.go): 0 the daemon's default, -1 none.
	maxConns, bandwidth int
}

func (f *netFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.egress, "egress", "", "outbound network: none (loopback only, default), internet, or custom with --allow/--deny")
	fs.StringArrayVar(&f.allow, "allow", nil, "allow egress to a domain (example.org, '*.example.org'), CIDR, address or :port (repeatable; implies --egress custom)")
	fs.StringArrayVar(&f.deny, "deny", nil, "deny egress to a domain, CIDR, address or :port; deny wins for addresses, the most specific domain rule wins (repeatable)")
	fs.StringVar(&f.preview, "preview", "", "who may open the preview URLs: token (default) or public")
	fs.IntVar(&f.maxConns, "max-connections", 0, "most connections open at once through egress (-1: no limit; default: the daemon's, 1024)")
	fs.IntVar(&f.bandwidth, "bandwidth", 0, "bandwidth limit each way in Mbit/s (-1: no limit; default: the daemon's, none)")
}

// request returns the create request's network field, nil when no flag
// was given (the daemon's defaults apply).
func (f *netFlags) request() *api.Network {
	if f.egress == "" && len(f.allow) == 0 && len(f.deny) == 0 && f.preview == "" && f.maxConns == 0 && f.bandwidth == 0 {
		return nil
	}
	n := &api.Network{Egress: f.egress, Allow: f.allow, Deny: f.deny, Preview: f.preview,
		MaxConnections: f.maxConns, BandwidthMbit: f.bandwidth}
	if n.Egress == "" && len(f.allow) > 0 {
		n.Egress = api.EgressCustom
	}
	return n
}
