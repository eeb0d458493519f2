package network

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Domain is one domain rule: a name ("example.org": that name only) or,
// with Wildcard, its subdomains at any depth ("*.example.org" matches
// a.example.org and a.b.example.org, not example.org itself).
type Domain struct {
	Name     string // lower case, no trailing dot, no "*."
	Wildcard bool
}

func (d Domain) String() string {
	if d.Wildcard {
		return "*." + d.Name
	}
	return d.Name
}

// matches reports whether name (canonical: see CanonicalName) falls under
// d, and how specific the match is: a longer suffix is more specific, and
// an exact name beats any wildcard.
func (d Domain) matches(name string) (int, bool) {
	if d.Wildcard {
		if strings.HasSuffix(name, "."+d.Name) {
			return 2 * len(d.Name), true
		}
		return 0, false
	}
	if name == d.Name {
		return 2*len(d.Name) + 1, true
	}
	return 0, false
}

// CanonicalName lower-cases a DNS name and drops its trailing dot.
func CanonicalName(name string) string {
	return strings.TrimSuffix(strings.ToLower(name), ".")
}

// ParseDomain parses s as a domain rule. ok is false when s is not
// domain-shaped at all (a CIDR, an address, a port rule: ParseRule's
// business); with ok true, err says what is wrong with the domain.
func ParseDomain(s string) (d Domain, ok bool, err error) {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsAny(s, ":/[]") {
		return Domain{}, false, nil
	}
	if _, perr := netip.ParseAddr(s); perr == nil {
		return Domain{}, false, nil
	}
	if strings.Trim(s, "0123456789") == "" {
		return Domain{}, false, nil // a bare number: ParseRule explains
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune("-._*", c)) {
			return Domain{}, false, nil
		}
	}
	name := CanonicalName(s)
	if strings.HasPrefix(name, "*.") {
		d.Wildcard = true
		name = name[2:]
	}
	if strings.Contains(name, "*") {
		return Domain{}, true, errdefs.Invalid("domain rule %q: a wildcard may only be the first label, as in *.example.com", s)
	}
	if len(name) == 0 || len(name) > 253 {
		return Domain{}, true, errdefs.Invalid("domain rule %q: a name is 1 to 253 characters", s)
	}
	labels := strings.Split(name, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 {
			return Domain{}, true, errdefs.Invalid("domain rule %q: each label is 1 to 63 characters", s)
		}
		if l[0] == '-' || l[len(l)-1] == '-' {
			return Domain{}, true, errdefs.Invalid("domain rule %q: a label may not start or end with '-'", s)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
				return Domain{}, true, errdefs.Invalid("domain rule %q: %q is not allowed in a name (letters, digits, '-' and '_')", s, c)
			}
		}
	}
	if strings.Trim(labels[len(labels)-1], "0123456789") == "" {
		return Domain{}, true, errdefs.Invalid("rule %q is neither an address nor a domain (a top-level domain is never numeric)", s)
	}
	d.Name = name
	return d, true, nil
}

// HasDomains reports whether p has domain rules: its web ports then go
// through the SNI/Host proxy.
func (p Policy) HasDomains() bool { return len(p.AllowDomains)+len(p.DenyDomains) > 0 }

// NameVerdict decides whether a DNS name may be resolved and connected
// to: the most specific matching domain rule wins, deny on a tie; with no
// rule matching, egress internet allows and custom denies. reason names
// the deciding rule.
func (p Policy) NameVerdict(name string) (allowed bool, reason string) {
	name = CanonicalName(name)
	best, bestAllow, rule := -1, false, ""
	for _, l := range []struct {
		ds    []Domain
		allow bool
	}{{p.DenyDomains, false}, {p.AllowDomains, true}} {
		for _, d := range l.ds {
			if n, ok := d.matches(name); ok && n > best {
				best, bestAllow, rule = n, l.allow, d.String()
			}
		}
	}
	switch {
	case best >= 0 && bestAllow:
		return true, "allow " + rule
	case best >= 0:
		return false, "deny " + rule
	case p.Egress == api.EgressInternet:
		return true, "egress internet"
	default:
		return false, "no allow rule names it"
	}
}

// AddrVerdict is what the firewall's address rules say about a
// connection to addr:port (policyRules' order, first match wins).
type AddrVerdict int

const (
	// AddrBlocked: always blocked (the pool, link-local, metadata,
	// loopback) or a private range no allow rule names.
	AddrBlocked AddrVerdict = iota
	// AddrDenied: a deny rule matches.
	AddrDenied
	// AddrAllowed: an allow rule matches.
	AddrAllowed
	// AddrDefault: no rule matches; egress internet allows it, custom only
	// when an allowed name resolved to it.
	AddrDefault
)

// Addr evaluates addr:port as the sandbox chain does, before the set of
// resolved addresses: blocked ranges, deny, allow, private ranges.
func (p Policy) Addr(addr netip.Addr, port uint16, pool netip.Prefix) (AddrVerdict, string) {
	addr = addr.Unmap()
	for _, b := range append([]netip.Prefix{pool}, AlwaysBlocked...) {
		if b.Contains(addr) {
			return AddrBlocked, "always blocked (" + b.String() + ")"
		}
	}
	match := func(r Rule) bool {
		return (!r.Prefix.IsValid() || r.Prefix.Contains(addr)) && (r.Port == 0 || r.Port == port)
	}
	for _, r := range p.Deny {
		if match(r) {
			return AddrDenied, "deny " + r.String()
		}
	}
	for _, r := range p.Allow {
		if match(r) {
			return AddrAllowed, "allow " + r.String()
		}
	}
	for _, b := range Private {
		if b.Contains(addr) {
			return AddrBlocked, "private range " + b.String()
		}
	}
	return AddrDefault, "egress " + p.Egress
}

// String writes r back in rule syntax.
func (r Rule) String() string {
	var h string
	if r.Prefix.IsValid() {
		h = r.Prefix.String()
		if r.Prefix.IsSingleIP() {
			h = r.Prefix.Addr().String()
		}
	}
	if r.Port == 0 {
		return h
	}
	if r.Prefix.IsValid() && r.Prefix.Addr().Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(r.Port))
}
