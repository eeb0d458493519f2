package network

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/netutil"

	"github.com/agentbox/agentbox/api"
)

// Each sandbox with egress gets a guard: a DNS server on its gateway
// address (UDP and TCP port 53) that answers only names its policy
// allows, forwards those to the upstream resolvers and pins their A
// answers into the sandbox's nftables set for the record's TTL; the
// SNI/Host proxy (sniproxy.go) on the same address; and the egress log
// both write to.

// TTL bounds of a pinned address: a record's TTL below MinTTL still pins
// for MinTTL (a client connects right after resolving), and answers are
// capped at MaxTTL (so a client never caches longer than the pin).
const (
	MinTTL = 30 * time.Second
	MaxTTL = time.Hour
)

// maxInflight bounds one sandbox's concurrent upstream queries; past it
// queries get SERVFAIL at once.
const maxInflight = 32

// upstreamTimeout bounds one forwarded query.
const upstreamTimeout = 4 * time.Second

// Per sandbox: TCP connections to its resolver and connections through
// its proxy open at once (the connection limit of limits.go counts
// neither: they go to the input hook), and pinned address-name pairs.
const (
	maxDNSConns   = 64
	maxProxyConns = 1024
	maxPins       = 16384
)

// guard is one sandbox's resolver, proxy and egress log.
type guard struct {
	id  string
	sub Subnet
	m   *Manager
	log *egressLog

	mu  sync.Mutex
	pol Policy
	// resolved holds, per address, the names that resolved to it and
	// until when.
	resolved map[netip.Addr]map[string]time.Time

	inflight chan struct{}
	servers  []*dns.Server

	cmu   sync.Mutex
	conns map[net.Conn]struct{} // proxied connections; nil once stopped

	proxy net.Listener
	wg    sync.WaitGroup
}

// policy returns the guard's current policy.
func (g *guard) policy() Policy {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.pol
}

// record logs e with the time and the guard's sandbox.
func (g *guard) record(e api.EgressLogEntry) {
	e.Time = time.Now().UTC()
	g.log.add(e)
}

// startGuard opens sandbox id's resolver and proxy on its gateway
// address. The gateway must be up (addLink).
func (m *Manager) startGuard(id string, sub Subnet, pol Policy) error {
	m.stopGuard(id)
	g := &guard{id: id, sub: sub, m: m, pol: pol, resolved: map[netip.Addr]map[string]time.Time{},
		inflight: make(chan struct{}, maxInflight), conns: map[net.Conn]struct{}{}}
	m.gmu.Lock()
	if old := m.logs[id]; old != nil {
		g.log = old // a re-attach (reset, restart) keeps the log
	} else {
		g.log = &egressLog{counts: &m.counts}
		m.logs[id] = g.log
	}
	m.gmu.Unlock()
	addr := netip.AddrPortFrom(sub.Gateway, DNSPort).String()
	pc, err := net.ListenPacket("udp4", addr)
	if err != nil {
		return fmt.Errorf("sandbox %s: DNS listener on %s: %w", id, addr, err)
	}
	tl, err := net.Listen("tcp4", addr)
	if err != nil {
		pc.Close()
		return fmt.Errorf("sandbox %s: DNS listener on %s/tcp: %w", id, addr, err)
	}
	paddr := netip.AddrPortFrom(sub.Gateway, ProxyPort).String()
	pl, err := net.Listen("tcp4", paddr)
	if err != nil {
		pc.Close()
		tl.Close()
		return fmt.Errorf("sandbox %s: proxy listener on %s: %w", id, paddr, err)
	}
	g.proxy = pl
	g.servers = []*dns.Server{
		{PacketConn: pc, Handler: g, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second},
		{Listener: netutil.LimitListener(tl, maxDNSConns), Handler: g, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, MaxTCPQueries: 64},
	}
	// Wait until both servers run: Shutdown of a server not yet started
	// fails and would leave it serving.
	started := make(chan struct{}, 2*len(g.servers)) // a start and an end each
	for _, s := range g.servers {
		s.NotifyStartedFunc = func() { started <- struct{}{} }
		g.wg.Add(1)
		go func() {
			defer g.wg.Done()
			err := s.ActivateAndServe()
			if err != nil && !errors.Is(err, net.ErrClosed) {
				m.log.Debug("sandbox resolver stopped", "sandbox", id, "err", err)
			}
			started <- struct{}{} // in case it never started
		}()
	}
	for range g.servers {
		<-started
	}
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		g.serveProxy(pl)
	}()
	m.gmu.Lock()
	m.guards[id] = g
	m.gmu.Unlock()
	return nil
}

// stopGuard closes sandbox id's resolver and proxy (connections already
// spliced keep going until either side closes) and waits for their
// servers to end.
func (m *Manager) stopGuard(id string) {
	m.gmu.Lock()
	g := m.guards[id]
	delete(m.guards, id)
	m.gmu.Unlock()
	if g == nil {
		return
	}
	for _, s := range g.servers {
		_ = s.Shutdown()
	}
	// Closing the sockets too ends a server whatever state it is in.
	for _, s := range g.servers {
		if s.PacketConn != nil {
			s.PacketConn.Close()
		}
		if s.Listener != nil {
			s.Listener.Close()
		}
	}
	g.proxy.Close()
	g.closeConns()
	g.wg.Wait()
}

// dropLog forgets sandbox id's egress log (detach).
func (m *Manager) dropLog(id string) {
	m.gmu.Lock()
	delete(m.logs, id)
	m.gmu.Unlock()
}

// EgressLog returns sandbox id's egress log, oldest first; a sandbox
// without one (no egress yet) has an empty log.
func (m *Manager) EgressLog(id string) api.EgressLog {
	m.gmu.Lock()
	l := m.logs[id]
	m.gmu.Unlock()
	if l == nil {
		return api.EgressLog{Entries: []api.EgressLogEntry{}}
	}
	return l.snapshot()
}

// SetUpstreams sets the resolvers allowed queries go to ("ip" or
// "ip:port"); none means the host's /etc/resolv.conf servers.
func (m *Manager) SetUpstreams(servers []string) error {
	var out []string
	for _, s := range servers {
		if ap, err := netip.ParseAddrPort(s); err == nil {
			out = append(out, ap.String())
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return fmt.Errorf("dns_upstream %q is neither an address nor address:port", s)
		}
		out = append(out, netip.AddrPortFrom(a, 53).String())
	}
	m.gmu.Lock()
	m.upstreams = out
	m.gmu.Unlock()
	return nil
}

// upstreamServers returns the configured upstreams or the host's.
func (m *Manager) upstreamServers() []string {
	m.gmu.Lock()
	up := m.upstreams
	m.gmu.Unlock()
	if len(up) > 0 {
		return up
	}
	return hostResolvers("/etc/resolv.conf")
}

// hostResolvers reads the nameserver lines of a resolv.conf.
func hostResolvers(path string) []string {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 2 && fs[0] == "nameserver" {
			if a, err := netip.ParseAddr(fs[1]); err == nil {
				out = append(out, netip.AddrPortFrom(a.WithZone(""), 53).String())
			}
		}
	}
	return out
}

// ServeDNS answers one query of the sandbox.
func (g *guard) ServeDNS(w dns.ResponseWriter, req *dns.Msg) {
	proto := "udp"
	if _, ok := w.RemoteAddr().(*net.TCPAddr); ok {
		proto = "tcp"
	}
	e := api.EgressLogEntry{Kind: api.EgressKindDNS, Proto: proto, Dest: netip.AddrPortFrom(g.sub.Gateway, DNSPort).String()}
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.RecursionAvailable = true
	deny := func(rcode int, reason string) {
		resp.Rcode = rcode
		e.Verdict, e.Reason = api.VerdictDeny, reason
		g.record(e)
		_ = w.WriteMsg(resp)
	}
	if src, ok := addrOf(w.RemoteAddr()); !ok || src != g.sub.Addr {
		deny(dns.RcodeRefused, "query from "+w.RemoteAddr().String()+", not the sandbox's address")
		return
	}
	if req.Opcode != dns.OpcodeQuery || len(req.Question) != 1 {
		deny(dns.RcodeNotImplemented, "not a single-question query")
		return
	}
	q := req.Question[0]
	name := CanonicalName(q.Name)
	e.Name, e.QType = name, dns.TypeToString[q.Qtype]
	if e.QType == "" {
		e.QType = fmt.Sprint(q.Qtype)
	}
	if q.Qclass != dns.ClassINET {
		deny(dns.RcodeRefused, "class is not IN")
		return
	}
	pol := g.policy()
	ok, reason := pol.NameVerdict(name)
	if !ok {
		deny(dns.RcodeNameError, reason)
		return
	}
	e.Verdict, e.Reason = api.VerdictAllow, reason
	switch q.Qtype {
	case dns.TypeAAAA, dns.TypeHTTPS, dns.TypeSVCB, dns.TypeANY, dns.TypeAXFR, dns.TypeIXFR:
		// No IPv6 in a sandbox, and no address hints or zone dumps that
		// would bypass the A pins: an empty answer.
		e.Reason += "; empty answer for " + e.QType
		g.record(e)
		_ = w.WriteMsg(resp)
		return
	}
	select {
	case g.inflight <- struct{}{}:
		defer func() { <-g.inflight }()
	default:
		deny(dns.RcodeServerFailure, fmt.Sprintf("more than %d queries in flight", maxInflight))
		return
	}
	up, err := g.m.exchange(name, q.Qtype)
	if err != nil {
		resp.Rcode = dns.RcodeServerFailure
		e.Reason += "; upstream: " + err.Error()
		g.record(e)
		_ = w.WriteMsg(resp)
		return
	}
	resp.Rcode = up.Rcode
	resp.Answer, resp.Ns = up.Answer, up.Ns
	var addrs []netip.Addr
	ttl := MaxTTL
	for _, rr := range append(resp.Answer, resp.Ns...) {
		h := rr.Header()
		if time.Duration(h.Ttl)*time.Second > MaxTTL {
			h.Ttl = uint32(MaxTTL / time.Second)
		}
		if a, ok := rr.(*dns.A); ok {
			if ip, ok := netip.AddrFromSlice(a.A.To4()); ok {
				addrs = append(addrs, ip)
				e.Answers = append(e.Answers, ip.String())
				if d := time.Duration(h.Ttl) * time.Second; d < ttl {
					ttl = d
				}
			}
		}
	}
	if len(addrs) > 0 {
		ttl = max(ttl, MinTTL)
		if err := g.pin(name, addrs, ttl); err != nil {
			g.m.log.Warn("pinning resolved addresses", "sandbox", g.id, "name", name, "err", err)
			deny(dns.RcodeServerFailure, "pinning the answer in the firewall failed: "+err.Error())
			return
		}
	}
	g.record(e)
	size := dns.MinMsgSize
	if opt := req.IsEdns0(); opt != nil {
		size = max(int(opt.UDPSize()), dns.MinMsgSize)
		resp.SetEdns0(uint16(size), false)
	}
	if proto == "udp" {
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

// pin allows addrs for ttl in the firewall and remembers them for name,
// unless the policy changed meanwhile and denies name. g.mu is held
// across the firewall update so that a policy change (which flushes the
// set) and a pin never interleave.
func (g *guard) pin(name string, addrs []netip.Addr, ttl time.Duration) error {
	until := time.Now().Add(ttl)
	g.mu.Lock()
	defer g.mu.Unlock()
	if ok, reason := g.pol.NameVerdict(name); !ok {
		return errors.New("the policy changed: " + reason)
	}
	if len(g.resolved)+len(addrs) > maxPins {
		g.pruneLocked()
		if len(g.resolved)+len(addrs) > maxPins {
			return fmt.Errorf("more than %d addresses pinned; they expire with their TTL", maxPins)
		}
	}
	for _, a := range addrs {
		names := g.resolved[a]
		if names == nil {
			names = map[string]time.Time{}
			g.resolved[a] = names
		}
		if until.After(names[name]) {
			names[name] = until
		}
	}
	return g.m.pinAddrs(g.id, addrs, ttl)
}

// pruneLocked forgets expired pins.
func (g *guard) pruneLocked() {
	now := time.Now()
	for a, names := range g.resolved {
		for n, until := range names {
			if !until.After(now) {
				delete(names, n)
			}
		}
		if len(names) == 0 {
			delete(g.resolved, a)
		}
	}
}

// resolvedFor reports whether addr was resolved, and is still pinned, for
// a name the current policy allows; it returns that name.
func (g *guard) resolvedFor(addr netip.Addr) (string, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	for n, until := range g.resolved[addr] {
		if until.After(now) {
			if ok, _ := g.pol.NameVerdict(n); ok {
				return n, true
			}
		}
	}
	return "", false
}

// setPolicyLocked replaces the guard's policy and returns, per remaining
// time, the addresses still pinned for names the new policy allows (the
// caller, holding g.mu, re-adds them to the flushed set).
func (g *guard) setPolicyLocked(pol Policy) map[time.Duration][]netip.Addr {
	g.pol = pol
	now := time.Now()
	keep := map[time.Duration][]netip.Addr{}
	for a, names := range g.resolved {
		var best time.Time
		for n, until := range names {
			if ok, _ := pol.NameVerdict(n); !ok || !until.After(now) {
				delete(names, n)
				continue
			}
			if until.After(best) {
				best = until
			}
		}
		if len(names) == 0 {
			delete(g.resolved, a)
			continue
		}
		d := best.Sub(now).Truncate(time.Second) + time.Second
		keep[d] = append(keep[d], a)
	}
	return keep
}

// exchange forwards one question to the upstream resolvers, trying each
// in turn, over UDP and then TCP when the answer is truncated.
func (m *Manager) exchange(name string, qtype uint16) (*dns.Msg, error) {
	ups := m.upstreamServers()
	if len(ups) == 0 {
		return nil, errors.New("no upstream resolver: set [network] dns_upstream or a nameserver in /etc/resolv.conf")
	}
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(name), qtype)
	q.SetEdns0(1232, false)
	var lastErr error
	for _, up := range ups {
		ctx, cancel := context.WithTimeout(context.Background(), upstreamTimeout)
		c := &dns.Client{Net: "udp", Timeout: upstreamTimeout}
		r, _, err := c.ExchangeContext(ctx, q, up)
		if err == nil && r.Truncated {
			c.Net = "tcp"
			r, _, err = c.ExchangeContext(ctx, q, up)
		}
		cancel()
		if err == nil {
			return r, nil
		}
		lastErr = fmt.Errorf("%s: %w", up, err)
	}
	return nil, lastErr
}

// pinAddrs adds addrs to sandbox id's set for ttl.
func (m *Manager) pinAddrs(id string, addrs []netip.Addr, ttl time.Duration) error {
	c, err := newConn()
	if err != nil {
		return err
	}
	if err := m.fw.addResolved(c, id, addrs, ttl); err != nil {
		return err
	}
	return c.Flush()
}

func addrOf(a net.Addr) (netip.Addr, bool) {
	switch a := a.(type) {
	case *net.UDPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	case *net.TCPAddr:
		ip, ok := netip.AddrFromSlice(a.IP)
		return ip.Unmap(), ok
	}
	return netip.Addr{}, false
}

// guardOf returns sandbox id's guard, or nil.
func (m *Manager) guardOf(id string) *guard {
	m.gmu.Lock()
	defer m.gmu.Unlock()
	return m.guards[id]
}

// Close stops every sandbox's resolver and proxy and the firewall log
// reader. The sandboxes' rules and veths stay: a daemon that starts next
// rebuilds them and listens again.
func (m *Manager) Close() {
	m.gmu.Lock()
	var ids []string
	for id := range m.guards {
		ids = append(ids, id)
	}
	m.gmu.Unlock()
	for _, id := range ids {
		m.stopGuard(id)
	}
	m.stopNFLOG()
}
