package network

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"sync"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/errdefs"
)

// Manager wires sandboxes to the network: their veth pairs, addresses
// from the pool, and their nftables chains. One daemon has one Manager;
// its table is named after the daemon's cgroup parent, and it tags its
// veths with that name (the link alias), so daemons sharing a host leave
// each other's sandboxes alone.
type Manager struct {
	name string
	pool *Pool
	fw   firewall
	log  *slog.Logger
	mu   sync.Mutex

	// The DNS resolvers, proxies and egress logs (dns.go).
	gmu       sync.Mutex
	guards    map[string]*guard
	logs      map[string]*egressLog
	upstreams []string
	nflog     *nflogReader // the firewall's log reader (nflog.go)
	counts    egressCounts // every log's decisions (egresscount.go)
}

// Known is what a restarted daemon tells Start about a sandbox that keeps
// its network: its policy and recorded subnet.
type Known struct {
	Policy Policy
	Subnet Subnet
}

// NewManager returns a manager whose table and veth tag are name and
// whose addresses come from poolCIDR.
func NewManager(name, poolCIDR string, log *slog.Logger) (*Manager, error) {
	pool, err := NewPool(poolCIDR)
	if err != nil {
		return nil, err
	}
	return &Manager{
		name: name,
		pool: pool,
		fw:   firewall{table: &nftables.Table{Family: nftables.TableFamilyINet, Name: name}, pool: pool.base, nflog: nflogGroupOf(name), connCap: hostConnCap()},
		log:  log,

		guards: map[string]*guard{},
		logs:   map[string]*egressLog{},
	}, nil
}

// Pool is the manager's address pool.
func (m *Manager) Pool() *Pool { return m.pool }

// Table is the name of the manager's nftables table (family inet).
func (m *Manager) Table() string { return m.name }

// Start enables IPv4 forwarding, rebuilds the table for the known
// sandboxes (others' chains are dropped with the old table), reserves
// their subnets and removes this daemon's veths of unknown sandboxes.
func (m *Manager) Start(known map[string]Known) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_forward", []byte("1"), 0o644); err != nil {
		return fmt.Errorf("enabling IPv4 forwarding: %w", err)
	}
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	m.fw.reset(c)
	for id, k := range known {
		if err := m.pool.Restore(id, k.Subnet); err != nil {
			m.log.Warn("sandbox's recorded subnet cannot be restored", "sandbox", id, "err", err)
		}
		if err := m.fw.addSet(c, id); err != nil {
			return fmt.Errorf("sandbox %s: nftables set: %w", id, err)
		}
		m.fw.addSandbox(c, id, k.Policy)
		m.fw.addResolver(c, id, k.Subnet, k.Policy)
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("creating nftables table inet %s: %w", m.name, err)
	}
	if err := m.startNFLOG(); err != nil {
		m.log.Warn("the egress log will not show connections the firewall decides: reading its NFLOG group failed", "group", m.fw.nflog, "err", err)
	}
	for id, k := range known {
		// A stopped sandbox has no gateway yet: Attach starts its guard.
		if err := m.startGuard(id, k.Subnet, k.Policy); err != nil {
			m.log.Debug("sandbox resolver not started", "sandbox", id, "err", err)
		}
	}
	links, err := netlink.LinkList()
	if err != nil {
		return fmt.Errorf("listing links: %w", err)
	}
	knownLinks := map[string]bool{}
	for id := range known {
		knownLinks[LinkID(id)] = true
	}
	for _, l := range links {
		a := l.Attrs()
		if a.Alias != m.name || l.Type() != "veth" || len(a.Name) <= len(VethPrefix) {
			continue
		}
		if knownLinks[a.Name[len(VethPrefix):]] {
			continue
		}
		if err := netlink.LinkDel(l); err != nil {
			m.log.Warn("removing a leftover veth", "veth", a.Name, "err", err)
		} else {
			m.log.Info("removed a leftover veth", "veth", a.Name)
		}
	}
	return nil
}

// Attach gives sandbox id (its init is pid) a veth, an address, a chain
// holding pol and the limits lim (replacing earlier ones, as SetLimits).
// sub is the sandbox's recorded subnet, or zero to allocate one; the
// subnet used is returned for the caller to record. A first attach makes
// every rule in one nftables transaction.
func (m *Manager) Attach(id string, pid int, pol Policy, sub Subnet, lim Limits) (_ Subnet, err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if sub.Prefix.IsValid() {
		if err := m.pool.Restore(id, sub); err != nil {
			return Subnet{}, err
		}
	} else if sub, err = m.pool.Allocate(id); err != nil {
		return Subnet{}, err
	}
	defer func() {
		if err != nil {
			m.pool.Release(id)
		}
	}()
	c, err := nftables.New()
	if err != nil {
		return Subnet{}, fmt.Errorf("nftables: %w", err)
	}
	// A chain left by an earlier init (reset, cold start) is replaced,
	// and so are its limits (after the link: its shaping needs the veth).
	_, lerr := c.ListChain(m.fw.table, sandboxChain(id))
	if lerr == nil {
		m.fw.setPolicy(c, id, pol)
		m.fw.setRedirect(c, id, pol)
	} else {
		if err := m.fw.addSet(c, id); err != nil {
			return Subnet{}, fmt.Errorf("sandbox %s: nftables set: %w", id, err)
		}
		m.fw.addSandbox(c, id, pol)
		m.fw.addResolver(c, id, sub, pol)
		m.fw.addLimit(c, id, lim)
	}
	if err := c.Flush(); err != nil {
		return Subnet{}, errdefs.Unavailable("sandbox %s: nftables rules: %v; is the table inet %s intact? restart the daemon to rebuild it", id, err, m.name)
	}
	defer func() {
		if err != nil {
			m.detachLocked(id)
			_ = m.releaseLimitsLocked(id)
		}
	}()
	// Rules first, so the link never exists unfiltered.
	if err := addLink(id, pid, sub, m.name); err != nil {
		return Subnet{}, fmt.Errorf("sandbox %s: %w", id, err)
	}
	if lerr == nil {
		err = m.setLimitsLocked(id, lim)
	} else if lim.BandwidthMbit > 0 {
		err = applyShaping(id, m.name, lim)
	}
	if err != nil {
		return Subnet{}, err
	}
	// The resolver and proxy listen on the gateway, which now exists.
	if err := m.startGuard(id, sub, pol); err != nil {
		return Subnet{}, err
	}
	return sub, nil
}

// SetPolicy replaces sandbox id's rules; connections already open keep
// going, new ones see pol.
func (m *Manager) SetPolicy(id string, pol Policy) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	if _, err := c.ListChain(m.fw.table, sandboxChain(id)); err != nil {
		sub, ok := m.pool.Lookup(id)
		if !ok {
			return fmt.Errorf("sandbox %s has no address; attach it first", id)
		}
		if err := m.fw.addSet(c, id); err != nil {
			return fmt.Errorf("sandbox %s: nftables set: %w", id, err)
		}
		m.fw.addSandbox(c, id, pol)
		m.fw.addResolver(c, id, sub, pol)
	} else {
		m.fw.setPolicy(c, id, pol)
		m.fw.setRedirect(c, id, pol)
		// Addresses pinned for names the new policy denies go now; those
		// of names it still allows stay for the rest of their TTL.
		c.FlushSet(m.fw.set(id))
		if g := m.guardOf(id); g != nil {
			g.mu.Lock()
			defer g.mu.Unlock()
			for ttl, addrs := range g.setPolicyLocked(pol) {
				if err := m.fw.addResolved(c, id, addrs, ttl); err != nil {
					return err
				}
			}
		}
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("sandbox %s: replacing nftables rules: %w", id, err)
	}
	return nil
}

// Detach removes sandbox id's veth and chain and releases its address.
// Missing pieces are not errors.
func (m *Manager) Detach(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.detachLocked(id)
}

// Attached says whether sandbox id holds an address of the pool, as
// every sandbox with a network does (egress internet or custom, from its
// attach, or its record at a restart, until Detach): one without has no
// veth, chain, set, limits or shaper on the host.
func (m *Manager) Attached(id string) bool {
	_, ok := m.pool.Lookup(id)
	return ok
}

func (m *Manager) detachLocked(id string) error {
	m.stopGuard(id)
	m.dropLog(id)
	var errs []error
	if err := delLink(id); err != nil {
		errs = append(errs, err)
	}
	c, err := nftables.New()
	if err == nil {
		if _, lerr := c.ListChain(m.fw.table, sandboxChain(id)); lerr == nil {
			if err = m.fw.delSandbox(c, id); err == nil {
				err = c.Flush()
			}
		}
	}
	if err != nil {
		errs = append(errs, fmt.Errorf("removing nftables chain %s: %w", sandboxChain(id), err))
	}
	m.pool.Release(id)
	return errors.Join(errs...)
}

// SubnetOf returns the subnet whose sandbox address is addr
// ("10.200.0.2/30"), as recorded in a sandbox's network settings.
func SubnetOf(addr string) (Subnet, error) {
	p, err := netip.ParsePrefix(addr)
	if err != nil || p.Bits() != 30 || !p.Addr().Is4() {
		return Subnet{}, errdefs.Invalid("recorded sandbox address %q is not an IPv4 /30 address", addr)
	}
	base := p.Masked().Addr().As4()
	gw, sb := base, base
	gw[3]++
	sb[3] += 2
	return Subnet{Prefix: p.Masked(), Gateway: netip.AddrFrom4(gw), Addr: netip.AddrFrom4(sb)}, nil
}

// String is the sandbox address with its prefix length, as recorded.
func (s Subnet) String() string { return netip.PrefixFrom(s.Addr, s.Prefix.Bits()).String() }
