package network

import (
	"net"
	"net/netip"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// The nftables layout, one inet table per daemon (named after its cgroup
// parent, "agentbox" by default):
//
//	chain forward  (filter, hook forward): iifname "abx<id>" jump sbx-<id>
//	               for each sandbox; then replies to the pool accepted,
//	               anything else to the pool rejected
//	chain input    (filter, hook input): iifname "abx<id>" jump host
//	chain host     established,related accept; reject (the host itself)
//	chain postrouting (nat): ip saddr <pool> oifname != "abx*" masquerade
//	chain sbx-<id> the sandbox's egress policy (policyRules)

const hostChain = "host"

func sandboxChain(id string) string { return "sbx-" + id }

// reject answers with ICMP administratively prohibited (a TCP connect
// fails at once with EHOSTUNREACH).
func reject() expr.Any {
	return &expr.Reject{Type: unix.NFT_REJECT_ICMPX_UNREACH, Code: unix.NFT_REJECT_ICMPX_ADMIN_PROHIBITED}
}

func accept() expr.Any { return &expr.Verdict{Kind: expr.VerdictAccept} }

func ifname(n string) []byte {
	b := make([]byte, unix.IFNAMSIZ)
	copy(b, n)
	return b
}

func matchIf(key expr.MetaKey, name string) []expr.Any {
	return []expr.Any{
		&expr.Meta{Key: key, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: ifname(name)},
	}
}

func established() []expr.Any {
	return []expr.Any{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitESTABLISHED | expr.CtStateBitRELATED),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
	}
}

// matchAddr matches the destination (or, with src, the source) address
// against p, for p's family only.
func matchAddr(p netip.Prefix, src bool) []expr.Any {
	proto, off, n := byte(unix.NFPROTO_IPV4), uint32(16), uint32(4)
	if src {
		off = 12
	}
	if p.Addr().Is6() {
		proto, off, n = unix.NFPROTO_IPV6, 24, 16
		if src {
			off = 8
		}
	}
	ex := []expr.Any{
		&expr.Meta{Key: expr.MetaKeyNFPROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: off, Len: n},
	}
	if p.Bits() < int(n*8) {
		ex = append(ex, &expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: n,
			Mask: net.CIDRMask(p.Bits(), int(n*8)), Xor: make([]byte, n)})
	}
	return append(ex, &expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: p.Masked().Addr().AsSlice()})
}

// matchRule returns one expression list per protocol r needs: r's
// address, and with a port one list for TCP and one for UDP.
func matchRule(r Rule) [][]expr.Any {
	var base []expr.Any
	if r.Prefix.IsValid() {
		base = matchAddr(r.Prefix, false)
	}
	if r.Port == 0 {
		return [][]expr.Any{base}
	}
	var out [][]expr.Any
	for _, proto := range []byte{unix.IPPROTO_TCP, unix.IPPROTO_UDP} {
		ex := append(append([]expr.Any{}, base...),
			&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{proto}},
			&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
			&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(r.Port)},
		)
		out = append(out, ex)
	}
	return out
}

// policyRules is a sandbox chain's body, first match wins: replies;
// always-blocked destinations (the pool: other sandboxes); deny rules;
// allow rules; private ranges; then internet accepts, custom rejects.
// Direct DNS is rejected right after replies, and what allowed names
// resolved to (set, dnsfw.go) is accepted after the private ranges.
// Each accept and reject logs the new flow with its reason (lg, nflog.go).
func policyRules(pol Policy, pool netip.Prefix, set string, lg func(allow bool, reason string) []expr.Any) [][]expr.Any {
	var rules [][]expr.Any
	add := func(m []expr.Any, v expr.Any) { rules = append(rules, append(append([]expr.Any{}, m...), v)) }
	addL := func(m []expr.Any, allow bool, reason string) {
		v := reject()
		if allow {
			v = accept()
		}
		// The log statement has a rule of its own: over the sandbox's
		// log rate (nflog.go) it does not match, and the verdict rule
		// after it decides as always.
		if l := lg(allow, reason); len(l) > 0 {
			rules = append(rules, append(append([]expr.Any{}, m...), l...))
		}
		add(m, v)
	}
	add(established(), accept())
	for _, m := range dnsBlockRules() {
		addL(m, false, "DNS to another server than the sandbox's resolver")
	}
	for _, p := range append([]netip.Prefix{pool}, AlwaysBlocked...) {
		addL(matchAddr(p, false), false, "always blocked ("+p.String()+")")
	}
	for _, r := range pol.Deny {
		for _, m := range matchRule(r) {
			addL(m, false, "deny "+r.String())
		}
	}
	for _, r := range pol.Allow {
		for _, m := range matchRule(r) {
			addL(m, true, "allow "+r.String())
		}
	}
	for _, p := range Private {
		addL(matchAddr(p, false), false, "private range "+p.String())
	}
	addL(resolvedMatch(set), true, "address resolved for an allowed name")
	if pol.Egress == api.EgressInternet {
		addL(nil, true, "egress internet")
	} else {
		addL(nil, false, "egress custom: no rule allows it")
	}
	return rules
}

// firewall builds the table's netlink messages; the caller flushes.
type firewall struct {
	table *nftables.Table
	pool  netip.Prefix
	nflog uint16 // the NFLOG group rules log to (nflog.go); 0: none
	// connCap is the most conntrack entries one sandbox may hold
	// (limits.go).
	connCap int
}

func (f *firewall) chain(name string) *nftables.Chain {
	return &nftables.Chain{Name: name, Table: f.table}
}

// reset queues the removal of the table (if any) and its re-creation with
// the base chains.
func (f *firewall) reset(c *nftables.Conn) {
	c.AddTable(f.table)
	c.DelTable(f.table)
	c.AddTable(f.table)
	accPolicy := nftables.ChainPolicyAccept
	fwd := c.AddChain(&nftables.Chain{Name: "forward", Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookForward, Priority: nftables.ChainPriorityFilter, Policy: &accPolicy})
	c.AddChain(&nftables.Chain{Name: "input", Table: f.table, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookInput, Priority: nftables.ChainPriorityFilter, Policy: &accPolicy})
	host := c.AddChain(f.chain(hostChain))
	nat := c.AddChain(&nftables.Chain{Name: "postrouting", Table: f.table, Type: nftables.ChainTypeNAT,
		Hooknum: nftables.ChainHookPostrouting, Priority: nftables.ChainPriorityNATSource, Policy: &accPolicy})
	f.addPrerouting(c)
	toPool := matchAddr(f.pool, false)
	c.AddRule(&nftables.Rule{Table: f.table, Chain: fwd, Exprs: append(append(append([]expr.Any{}, toPool...), established()...), accept())})
	c.AddRule(&nftables.Rule{Table: f.table, Chain: fwd, Exprs: append(append([]expr.Any{}, toPool...), reject())})
	c.AddRule(&nftables.Rule{Table: f.table, Chain: host, Exprs: append(established(), accept())})
	c.AddRule(&nftables.Rule{Table: f.table, Chain: host, Exprs: []expr.Any{reject()}})
	masq := append(matchAddr(f.pool, true),
		&expr.Meta{Key: expr.MetaKeyOIFNAME, Register: 1},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: []byte(VethPrefix)},
		&expr.Masq{})
	c.AddRule(&nftables.Rule{Table: f.table, Chain: nat, Exprs: masq})
}

// addSandbox queues sandbox id's chain with pol and its jumps.
func (f *firewall) addSandbox(c *nftables.Conn, id string, pol Policy) {
	f.addLogLimit(c, id)
	ch := c.AddChain(f.chain(sandboxChain(id)))
	f.fillPolicy(c, ch, pol)
	veth := HostVeth(id)
	c.InsertRule(&nftables.Rule{Table: f.table, Chain: f.chain("forward"), UserData: []byte(id),
		Exprs: append(matchIf(expr.MetaKeyIIFNAME, veth), &expr.Verdict{Kind: expr.VerdictJump, Chain: ch.Name})})
	c.InsertRule(&nftables.Rule{Table: f.table, Chain: f.chain("input"), UserData: []byte(id),
		Exprs: append(matchIf(expr.MetaKeyIIFNAME, veth), &expr.Verdict{Kind: expr.VerdictJump, Chain: hostChain})})
}

// fillPolicy queues ch's rules for pol.
func (f *firewall) fillPolicy(c *nftables.Conn, ch *nftables.Chain, pol Policy) {
	id := strings.TrimPrefix(ch.Name, "sbx-")
	lg := func(allow bool, reason string) []expr.Any { return f.logExpr(id, allow, reason) }
	for _, ex := range policyRules(pol, f.pool, resolvedSet(id), lg) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: ch, Exprs: ex})
	}
}

// setPolicy queues the replacement of sandbox id's rules (atomic with the
// flush).
func (f *firewall) setPolicy(c *nftables.Conn, id string, pol Policy) {
	ch := f.chain(sandboxChain(id))
	c.FlushChain(ch)
	f.fillPolicy(c, ch, pol)
}

// delSandbox queues the removal of sandbox id's jumps and chain; it reads
// the base chains to find the jumps' handles.
func (f *firewall) delSandbox(c *nftables.Conn, id string) error {
	for _, base := range []string{"forward", "input", "prerouting"} {
		rules, err := c.GetRules(f.table, f.chain(base))
		if err != nil {
			return err
		}
		for _, r := range rules {
			if string(r.UserData) == id {
				if err := c.DelRule(r); err != nil {
					return err
				}
			}
		}
	}
	ch := f.chain(sandboxChain(id))
	c.FlushChain(ch)
	c.DelChain(ch)
	f.delLogLimit(c, id)
	f.delResolver(c, id)
	return nil
}
