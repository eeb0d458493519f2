package config

import (
	"fmt"
	"net"
	"strconv"
	"strings"
)

// Network ([network]) configures sandbox networking and preview URLs.
type Network struct {
	// PreviewDomain (preview_domain) is the domain of the preview URLs,
	// http://<port>-<id>.<preview_domain>/. Default "localhost", whose
	// subdomains resolve to 127.0.0.1 in browsers, curl and Go.
	PreviewDomain string `toml:"preview_domain"`
	// PreviewPort (preview_port) is the port put in preview URLs; 0 is the
	// port of listen (none when listen is "").
	PreviewPort int `toml:"preview_port"`
	// Pool (pool) is the IPv4 range from which each sandbox with egress
	// gets a /30 for its veth pair. Default 10.200.0.0/16; daemons sharing
	// a host need disjoint pools.
	Pool string `toml:"pool"`
	// MaxConnections (max_connections) is the default limit on the
	// connections a sandbox with egress has open at once (limits.go);
	// 0: none. Default 1024.
	MaxConnections int `toml:"max_connections"`
	// BandwidthMbit (bandwidth_mbit) is the default limit on a sandbox's
	// traffic in each direction, in Mbit/s; 0: none (the default).
	BandwidthMbit int `toml:"bandwidth_mbit"`
	// DNSUpstream (dns_upstream) are the resolvers ("ip" or "ip:port")
	// to which each sandbox's DNS server forwards the queries its policy
	// allows. Default: the nameservers of the host's /etc/resolv.conf.
	DNSUpstream Resolvers `toml:"dns_upstream"`
}

// Resolvers is a list of DNS servers; an empty list decodes as nil (the
// default).
type Resolvers []string

// UnmarshalTOML decodes an array of strings.
func (r *Resolvers) UnmarshalTOML(v any) error {
	arr, ok := v.([]any)
	if !ok {
		return fmt.Errorf("dns_upstream must be an array of strings, like [\"192.0.2.53\"]")
	}
	*r = nil
	for _, x := range arr {
		s, ok := x.(string)
		if !ok {
			return fmt.Errorf("dns_upstream must be an array of strings, like [\"192.0.2.53\"]; got %v", x)
		}
		*r = append(*r, s)
	}
	return nil
}

// NetworkPool returns the sandbox address pool, defaulted.
func (c Config) NetworkPool() string {
	if c.Network.Pool == "" {
		return "10.200.0.0/16"
	}
	return c.Network.Pool
}

// PreviewDomain returns the preview domain, defaulted and lower-cased.
func (c Config) PreviewDomain() string {
	d := strings.ToLower(strings.Trim(c.Network.PreviewDomain, "."))
	if d == "" {
		return "localhost"
	}
	return d
}

// PreviewHost is the host suffix of preview URLs with its port:
// "localhost:7423".
func (c Config) PreviewHost() string {
	port := ""
	if c.Network.PreviewPort > 0 {
		port = strconv.Itoa(c.Network.PreviewPort)
	} else if c.Listen != "" {
		_, port, _ = net.SplitHostPort(c.Listen)
	}
	if port == "" || port == "80" {
		return c.PreviewDomain()
	}
	return c.PreviewDomain() + ":" + port
}
