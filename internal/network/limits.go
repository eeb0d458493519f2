package network

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Limits are a sandbox's connection and bandwidth limits, enforced on the
// host without the sandbox's cooperation:
//
//   - MaxConnections: `ct state new ct count over N reject` in a chain
//     lim-<id>, jumped to (iifname "abx<id>") from the top of the forward
//     chain and of the input chain, so one count holds both the flows
//     the sandbox sends out and those to its gateway's resolver and
//     proxy. The count is of the connections (TCP, UDP flows) the
//     sandbox opened that conntrack still tracks (closed TCP ones drop
//     out); the N+1st new one is rejected (connect fails with
//     EHOSTUNREACH). No sandbox is without it: "no limit" and any limit
//     above the host's share (connShare of nf_conntrack_max) count to
//     that share, so that no one sandbox fills the host's conntrack table
//     (which would drop every new connection of the host, the API's
//     included).
//   - BandwidthMbit, each direction: download (host to sandbox) by a tbf
//     qdisc at the root of the host-side veth; upload (sandbox to host) by
//     redirecting the veth's ingress (u32 match-all, mirred) to an ifb
//     device "abi<id>" with the same tbf. Both queue and pace rather than
//     police, so TCP runs close to the rate.
//
// Zero means no limit.
type Limits struct {
	MaxConnections int
	BandwidthMbit  int
}

// nftConnlimitInvert is NFT_CONNLIMIT_F_INV: the expression matches when
// the count is over the limit.
const nftConnlimitInvert = 1

// connShare is the part of the host's conntrack table (nf_conntrack_max)
// one sandbox may hold at most; minConnCap is the least it may hold
// whatever the table's size.
const (
	connShare  = 16
	minConnCap = 1024
)

// hostConnCap is the per-sandbox conntrack ceiling on this host.
func hostConnCap() int {
	b, err := os.ReadFile("/proc/sys/net/netfilter/nf_conntrack_max")
	if err != nil {
		return 16384 // the module is not loaded yet: its default table / 16
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n <= 0 {
		return 16384
	}
	return max(n/connShare, minConnCap)
}

// connCount is the count the firewall enforces for l: its
// MaxConnections, at most the host's ceiling (none: the ceiling).
func (f *firewall) connCount(l Limits) int {
	if l.MaxConnections <= 0 || l.MaxConnections > f.connCap {
		return f.connCap
	}
	return l.MaxConnections
}

// connLimitRules is the chain rule that rejects a new connection beyond
// count, or nothing for a count of 0.
func connLimitRules(count int) [][]expr.Any {
	if count <= 0 {
		return nil
	}
	return [][]expr.Any{{
		&expr.Ct{Register: 1, Key: expr.CtKeySTATE},
		&expr.Bitwise{SourceRegister: 1, DestRegister: 1, Len: 4,
			Mask: binaryutil.NativeEndian.PutUint32(expr.CtStateBitNEW),
			Xor:  binaryutil.NativeEndian.PutUint32(0)},
		&expr.Cmp{Op: expr.CmpOpNeq, Register: 1, Data: binaryutil.NativeEndian.PutUint32(0)},
		&expr.Connlimit{Count: uint32(count), Flags: nftConnlimitInvert},
		reject(),
	}}
}

// Shaping parameters. A tbf's burst must hold the largest packet the veth
// passes (GSO: 64 KiB) or such packets never pass; beyond that, 100 ms of
// traffic. The queue holds a quarter second more.
const (
	minBurst    = 128 << 10
	queueTime   = 4 // rate/queueTime bytes of queue
	ingressPrio = 1
	// IfbPrefix starts the name of a sandbox's upload shaper device.
	IfbPrefix = "abi"
)

// bandwidth returns bytes per second and the burst for mbit.
func bandwidth(mbit int) (rate uint64, burst uint32) {
	rate = uint64(mbit) * 1_000_000 / 8
	burst = uint32(max(rate/10, minBurst))
	return rate, burst
}

func tbf(link netlink.Link, mbit int) *netlink.Tbf {
	rate, burst := bandwidth(mbit)
	return &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Buffer:     netlink.Xmittime(rate, burst),
		Limit:      burst + uint32(rate/queueTime),
	}
}

// applyShaping sets (or, with no bandwidth limit, removes) the download
// and upload shaping of sandbox id's host-side veth; alias tags the ifb
// device like the veth (the daemon's table name).
func applyShaping(id, alias string, l Limits) error {
	name := HostVeth(id)
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Errorf("finding veth %s: %w", name, err)
	}
	ingress := &netlink.Ingress{QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index,
		Handle: netlink.MakeHandle(0xffff, 0), Parent: netlink.HANDLE_INGRESS}}
	if l.BandwidthMbit <= 0 {
		var errs []error
		for _, q := range []netlink.Qdisc{tbf(link, 1), ingress} {
			if err := netlink.QdiscDel(q); err != nil && !missing(err) {
				errs = append(errs, fmt.Errorf("removing the %s qdisc of %s: %w", q.Type(), name, err))
			}
		}
		return errors.Join(append(errs, delIfb(id))...)
	}
	if err := netlink.QdiscReplace(tbf(link, l.BandwidthMbit)); err != nil {
		return fmt.Errorf("shaping %s to %d Mbit/s: %w", name, l.BandwidthMbit, err)
	}
	ifb, err := netlink.LinkByName(ifbName(id))
	if err != nil {
		la := netlink.NewLinkAttrs()
		la.Name, la.Alias = ifbName(id), alias
		if err := netlink.LinkAdd(&netlink.Ifb{LinkAttrs: la}); err != nil {
			return fmt.Errorf("creating %s: %w", la.Name, err)
		}
		if ifb, err = netlink.LinkByName(la.Name); err != nil {
			return fmt.Errorf("finding %s: %w", la.Name, err)
		}
		if err := netlink.LinkSetUp(ifb); err != nil {
			return fmt.Errorf("bringing %s up: %w", la.Name, err)
		}
	}
	if err := netlink.QdiscReplace(tbf(ifb, l.BandwidthMbit)); err != nil {
		return fmt.Errorf("shaping %s to %d Mbit/s: %w", ifbName(id), l.BandwidthMbit, err)
	}
	if err := netlink.QdiscAdd(ingress); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("ingress qdisc of %s: %w", name, err)
	}
	redirect := &netlink.U32{
		FilterAttrs: netlink.FilterAttrs{LinkIndex: link.Attrs().Index, Parent: ingress.Handle,
			Priority: ingressPrio, Protocol: unix.ETH_P_ALL},
		Sel:     &netlink.TcU32Sel{Flags: netlink.TC_U32_TERMINAL, Nkeys: 1, Keys: []netlink.TcU32Key{{}}},
		Actions: []netlink.Action{netlink.NewMirredAction(ifb.Attrs().Index)},
	}
	if err := netlink.FilterReplace(redirect); err != nil {
		return fmt.Errorf("redirecting the upload of %s to %s: %w", name, ifbName(id), err)
	}
	return nil
}

func ifbName(id string) string { return IfbPrefix + LinkID(id) }

// IfbName is the name of sandbox id's upload shaper device.
func IfbName(id string) string { return ifbName(id) }

// delIfb removes sandbox id's ifb device, if any.
func delIfb(id string) error {
	l, err := netlink.LinkByName(ifbName(id))
	if err != nil {
		return nil
	}
	if err := netlink.LinkDel(l); err != nil {
		return fmt.Errorf("removing %s: %w", ifbName(id), err)
	}
	return nil
}

// missing reports whether a qdisc removal failed only because there was
// nothing to remove.
func missing(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EINVAL) || errors.Is(err, os.ErrNotExist)
}

// Shaping describes the shaping of sandbox id: its veth's and its ifb
// device's qdiscs, as "veth tbf rate=<bytes/s>", "veth ingress", "ifb tbf
// rate=<bytes/s>". For tests and diagnostics.
func Shaping(id string) ([]string, error) {
	link, err := netlink.LinkByName(HostVeth(id))
	if err != nil {
		return nil, err
	}
	var out []string
	links := []netlink.Link{link}
	if ifb, err := netlink.LinkByName(ifbName(id)); err == nil {
		links = append(links, ifb)
	}
	for _, l := range links {
		qs, err := netlink.QdiscList(l)
		if err != nil {
			return nil, err
		}
		for _, q := range qs {
			switch q := q.(type) {
			case *netlink.Tbf:
				out = append(out, fmt.Sprintf("%s tbf rate=%d", l.Type(), q.Rate))
			case *netlink.Ingress:
				out = append(out, l.Type()+" ingress")
			}
		}
	}
	return out, nil
}

// ReleaseLimits removes what SetLimits made that Detach does not: the
// chain lim-<id> (Detach removed its jump) and the ifb device. The
// service calls it when the sandbox's network goes.
func (m *Manager) ReleaseLimits(id string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.releaseLimitsLocked(id)
}

func (m *Manager) releaseLimitsLocked(id string) error {
	var errs []error
	if c, err := nftables.New(); err == nil {
		if _, lerr := c.ListChain(m.fw.table, limitChain(id)); lerr == nil {
			lim := m.fw.chain(limitChain(id))
			c.FlushChain(lim)
			c.DelChain(lim)
			if err := c.Flush(); err != nil {
				errs = append(errs, fmt.Errorf("removing nftables chain %s: %w", lim.Name, err))
			}
		}
	}
	return errors.Join(append(errs, delIfb(id))...)
}

// CleanupLimits removes this daemon's ifb devices (tagged with its table
// name) of sandboxes not in keep, as Start does with veths.
func (m *Manager) CleanupLimits(keep map[string]bool) []string {
	links, err := netlink.LinkList()
	if err != nil {
		return nil
	}
	var removed []string
	keep = linkIDs(keep)
	for _, l := range links {
		a := l.Attrs()
		if a.Alias != m.name || l.Type() != "ifb" || !strings.HasPrefix(a.Name, IfbPrefix) || keep[a.Name[len(IfbPrefix):]] {
			continue
		}
		if err := netlink.LinkDel(l); err == nil {
			removed = append(removed, a.Name)
		}
	}
	return removed
}

func limitChain(id string) string { return "lim-" + id }

// SetLimits applies l to sandbox id, replacing earlier limits. The
// connection limit lives in a chain lim-<id> of its own, jumped to from
// the top of the forward chain ahead of the sandbox's policy chain (so a
// policy change keeps the count); the jump is tagged with id like the
// policy jump, so Detach removes it, and ReleaseLimits the chain. The
// shaping is on the host-side veth and the ifb device, and is skipped
// while the sandbox has no veth (a stopped sandbox: Attach, then
// SetLimits again, give it one). A restarted daemon's Start rebuilds the
// table without the chain: the service calls SetLimits again for the
// sandboxes it keeps. Every step costs the same whatever the number of
// sandboxes (no chain is listed).
func (m *Manager) SetLimits(id string, l Limits) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.setLimitsLocked(id, l)
}

// addLimit queues, for a sandbox attached for the first time, its chain
// lim-<id> with l's connection limit and the jumps to it (SetLimits); a
// chain of that name left behind is emptied first. It must come after
// addResolver: the input jump goes ahead of the resolver's accepts.
func (f *firewall) addLimit(c *nftables.Conn, id string, l Limits) {
	lim := c.AddChain(f.chain(limitChain(id)))
	c.FlushChain(lim)
	f.addLimitJumps(c, id)
	for _, ex := range connLimitRules(f.connCount(l)) {
		c.AddRule(&nftables.Rule{Table: f.table, Chain: lim, Exprs: ex})
	}
}

// addLimitJumps queues the jumps to lim-<id> at the top of the forward
// and input chains, tagged with id (Detach removes them).
func (f *firewall) addLimitJumps(c *nftables.Conn, id string) {
	for _, base := range []string{"forward", "input"} {
		c.InsertRule(&nftables.Rule{Table: f.table, Chain: f.chain(base), UserData: []byte(id),
			Exprs: append(matchIf(expr.MetaKeyIIFNAME, HostVeth(id)), &expr.Verdict{Kind: expr.VerdictJump, Chain: limitChain(id)})})
	}
}

func (m *Manager) setLimitsLocked(id string, l Limits) error {
	c, err := nftables.New()
	if err != nil {
		return fmt.Errorf("nftables: %w", err)
	}
	lim := m.fw.chain(limitChain(id))
	_, lerr := c.ListChain(m.fw.table, lim.Name)
	switch {
	case lerr == nil:
		c.FlushChain(lim)
	default:
		c.AddChain(lim)
		m.fw.addLimitJumps(c, id)
	}
	for _, ex := range connLimitRules(m.fw.connCount(l)) {
		c.AddRule(&nftables.Rule{Table: m.fw.table, Chain: lim, Exprs: ex})
	}
	if err := c.Flush(); err != nil {
		return fmt.Errorf("sandbox %s: connection limit: %w", id, err)
	}
	if l.BandwidthMbit <= 0 {
		if _, err := netlink.LinkByName(ifbName(id)); err != nil {
			return nil // never shaped: nothing to remove
		}
	} else if _, err := netlink.LinkByName(HostVeth(id)); err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) {
			return nil
		}
	}
	return applyShaping(id, m.name, l)
}
