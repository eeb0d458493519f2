package network

import (
	"net/netip"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The firewall's part in domain rules (see docs/network.md):
//
//	set   dns-<id>      ipv4_addr with timeouts: what allowed names
//	                    resolved to, each for its record's TTL
//	chain sbx-<id>      DNS and DNS-over-TLS (53, 853) to anywhere rejected
//	                    (the daemon's resolver is the gateway: input, not
//	                    forward); after the private ranges, ip daddr
//	                    @dns-<id> accept
//	chain input         iifname abx<id> ip daddr <gateway> udp/tcp dport 53
//	                    and tcp dport ProxyPort accept (before the jump to
//	                    host, which rejects the rest)
//	chain prerouting    (nat, dstnat) iifname abx<id> jump nat-<id>
//	chain nat-<id>      with domain rules: tcp dport 80, 443 redirect to
//	                    :ProxyPort (the SNI/Host proxy on the gateway)

// ProxyPort is the port of each sandbox's SNI/Host proxy on its gateway
// address; DNSPort that of its resolver.
const (
	ProxyPort = 15443
	DNSPort   = 53
)

func resolvedSet(id string) string { return "dns-" + id }

func natChain(id string) string { return "nat-" + id }

// dnsPorts are the ports of direct DNS that no sandbox may reach.
var dnsPorts = []uint16{53, 853}

// webPorts go through the SNI/Host proxy for sandboxes with domain rules.
var webPorts = []uint16{80, 443}

func (f *firewall) set(id string) *nftables.Set {
	return &nftables.Set{Table: f.table, Name: resolvedSet(id), KeyType: nftables.TypeIPAddr, HasTimeout: true}
}

// dnsBlockRules match direct DNS and DNS over TLS (TCP and UDP), which
// the sandbox chain rejects.
func dnsBlockRules() [][]expr.Any {
	var out [][]expr.Any
	for _, p := range dnsPorts {
		out = append(out, matchRule(Rule{Port: p})...)
	}
	return out
}

// resolvedMatch matches IPv4 destinations in the sandbox's set, which the
// sandbox chain accepts.
func resolvedMatch(set string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set},
	}
}

func matchL4Port(proto byte, port uint16) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(port)},
	}
}

// addPrerouting queues the table's nat prerouting base chain (reset).
func (f *firewall) addPrerouting(c *nftables.Conn) {
	accPolicy := nftables.ChainPolicyAccept
	c.AddChain(&nftables.Chain{Name: "prerouting", Table: f.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPrerouting, Priority: nftables.ChainPriorityNATDest, Policy: &accPolicy})
}

// addSet queues sandbox id's set; it must come before the sandbox chain
// (which looks the set up).
func (f *firewall) addSet(c *nftables.Conn, id string) error {
	return c.AddSet(f.set(id), nil)
}

// addResolver queues sandbox id's input accepts for the gateway's
// resolver and proxy, and its nat chain holding pol's redirects. It must
// come after addSandbox: the accepts are inserted before its jump.
func (f *firewall) addResolver(c *nftables.Conn, id string, sub Subnet, pol Policy) {
	veth := HostVeth(id)
	gw := matchAddr(netip.PrefixFrom(sub.Gateway, 32), false)
	for _, pp := range []struct {
		proto byte
		port  uint16
	}{{unix.IPPROTO_UDP, DNSPort}, {unix.IPPROTO_TCP, DNSPort}, {unix.IPPROTO_TCP, ProxyPort}} {
		ex := append(append(matchIf(expr.MetaKeyIIFNAME, veth), gw...), matchL4Port(pp.proto, pp.port)...)
		c.InsertRule(&nftables.Rule{Table: f.table, Chain: f.chain("input"), UserData: []byte(id), Exprs: append(ex, accept())})
	}
	nat := c.AddChain(f.chain(natChain(id)))
	f.fillRedirect(c, nat, pol)
	c.AddRule(&nftables.Rule{Table: f.table, Chain: f.chain("prerouting"), UserData: []byte(id),
		Exprs: append(matchIf(expr.MetaKeyIIFNAME, veth), &expr.Verdict{Kind: expr.VerdictJump, Chain: nat.Name})})
}

// fillRedirect queues the nat chain's redirects of web ports to the
// proxy, for a policy with domain rules.
func (f *firewall) fillRedirect(c *nftables.Conn, nat *nftables.Chain, pol Policy) {
	if !pol.HasDomains() {
		return
	}
	for _, p := range webPorts {
		ex := []expr.Any{
			&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.NFPROTO_IPV4}},
		}
		ex = append(ex, matchL4Port(unix.IPPROTO_TCP, p)...)
		ex = append(ex,
			&expr.Immediate{Register: 1, Data: binaryutil.BigEndian.PutUint16(ProxyPort)},
			&expr.Redir{RegisterProtoMin: 1})
		c.AddRule(&nftables.Rule{Table: f.table, Chain: nat, Exprs: ex})
	}
}

// setRedirect queues the replacement of sandbox id's redirects.
func (f *firewall) setRedirect(c *nftables.Conn, id string, pol Policy) {
	nat := f.chain(natChain(id))
	c.FlushChain(nat)
	f.fillRedirect(c, nat, pol)
}

// delResolver queues the removal of sandbox id's nat chain and set (its
// rules in the base chains go with delSandbox, by their user data).
func (f *firewall) delResolver(c *nftables.Conn, id string) {
	nat := f.chain(natChain(id))
	c.FlushChain(nat)
	c.DelChain(nat)
	c.DelSet(f.set(id))
}

// addResolved queues addrs into sandbox id's set for ttl.
func (f *firewall) addResolved(c *nftables.Conn, id string, addrs []netip.Addr, ttl time.Duration) error {
	var els []nftables.SetElement
	for _, a := range addrs {
		if a.Is4() {
			b := a.As4()
			els = append(els, nftables.SetElement{Key: b[:], Timeout: ttl})
		}
	}
	if len(els) == 0 {
		return nil
	}
	return c.SetAddElements(f.set(id), els)
}

// Lookup returns id's subnet if it holds one.
func (p *Pool) Lookup(id string) (Subnet, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	i, ok := p.byID[id]
	if !ok {
		return Subnet{}, false
	}
	return p.block(i), true
}
