package network

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
)

// Rule is one parsed allow or deny entry: an address prefix (invalid:
// any address) and a port (0: any port). A port matches TCP and UDP.
type Rule struct {
	Prefix netip.Prefix
	Port   uint16
}

// Policy is a sandbox's egress policy in the form the firewall needs.
type Policy struct {
	Egress      string // api.EgressInternet or api.EgressCustom
	Allow, Deny []Rule
	// AllowDomains and DenyDomains are the domain rules (domain.go),
	// enforced by the sandbox's DNS server and the SNI/Host proxy.
	AllowDomains, DenyDomains []Domain
}

// ParsePolicy checks egress and its allow and deny lists. Entries are
// "CIDR", "ADDR", ":PORT", "CIDR:PORT", "[IPv6-CIDR]:PORT", or a domain:
// "example.org" (that name only) or "*.example.org" (its subdomains).
func ParsePolicy(egress string, allow, deny []string) (Policy, error) {
	p := Policy{Egress: egress}
	for _, l := range []struct {
		in   []string
		out  *[]Rule
		outD *[]Domain
	}{{allow, &p.Allow, &p.AllowDomains}, {deny, &p.Deny, &p.DenyDomains}} {
		for _, s := range l.in {
			if d, ok, err := ParseDomain(s); ok {
				if err != nil {
					return Policy{}, err
				}
				*l.outD = append(*l.outD, d)
				continue
			}
			r, err := ParseRule(s)
			if err != nil {
				return Policy{}, err
			}
			*l.out = append(*l.out, r)
		}
	}
	return p, nil
}

// ParseRule parses one allow or deny entry (see ParsePolicy).
func ParseRule(s string) (Rule, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return Rule{}, errdefs.Invalid("an empty rule; give a CIDR, an address or :port")
	}
	host, port := s, ""
	switch {
	case strings.HasPrefix(s, "["):
		end := strings.Index(s, "]")
		if end < 0 {
			return Rule{}, errdefs.Invalid("rule %q: missing ]", s)
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if s[end+1:] != "" && !strings.HasPrefix(s[end+1:], ":") {
			return Rule{}, errdefs.Invalid("rule %q: expected :port after ]", s)
		}
	case strings.Count(s, ":") == 1:
		i := strings.LastIndex(s, ":")
		host, port = s[:i], s[i+1:]
	}
	var r Rule
	if port != "" {
		n, err := strconv.ParseUint(port, 10, 16)
		if err != nil || n == 0 {
			return Rule{}, errdefs.Invalid("rule %q: port %q must be a number from 1 to 65535", s, port)
		}
		r.Port = uint16(n)
	}
	if host == "" {
		if r.Port == 0 {
			return Rule{}, errdefs.Invalid("rule %q names neither an address nor a port", s)
		}
		return r, nil
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil {
			return Rule{}, errdefs.Invalid("rule %q: %q is not a CIDR: %v", s, host, err)
		}
		r.Prefix = p.Masked()
		return r, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		r.Prefix = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		return r, nil
	}
	if looksLikeDomain(host) {
		return Rule{}, errdefs.Invalid("rule %q is a domain with a port: domain rules take no port; give the domain alone (see docs/network.md)", s)
	}
	return Rule{}, errdefs.Invalid("rule %q is neither a CIDR, an address, :port nor a domain", s)
}

func looksLikeDomain(h string) bool {
	h = strings.TrimPrefix(h, "*.")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.') {
			return false
		}
	}
	return strings.Contains(h, ".") || !strings.ContainsAny(h, "0123456789")
}

// AlwaysBlocked are the destinations no policy opens (besides the host's
// own addresses, which the input hook drops, and the sandbox pool, added
// by the firewall): link-local and cloud metadata addresses.
var AlwaysBlocked = []netip.Prefix{
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("127.0.0.0/8"),
	netip.MustParsePrefix("::1/128"),
}

// Private are the ranges blocked unless an allow rule names them.
var Private = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("fc00::/7"),
}
