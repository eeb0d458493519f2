package network

import (
	"fmt"
	"net/netip"
	"sync"

	"github.com/agentbox/agentbox/errdefs"
)

// Subnet is one sandbox's /30: the host side of its veth is Gateway, the
// sandbox side Addr.
type Subnet struct {
	Prefix  netip.Prefix `json:"prefix"`
	Gateway netip.Addr   `json:"gateway"`
	Addr    netip.Addr   `json:"addr"`
}

// Pool hands out /30 subnets of an IPv4 range, one per sandbox id. It
// never gives the same subnet to two ids; Restore re-reserves what a
// previous daemon handed out, so addresses survive a restart.
type Pool struct {
	base  netip.Prefix
	count int // number of /30 blocks

	mu   sync.Mutex
	used map[int]string // block index -> sandbox id
	byID map[string]int
	hint int // where the next search starts
}

// NewPool returns a pool over cidr, an IPv4 prefix of /16 to /29.
func NewPool(cidr string) (*Pool, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil {
		return nil, errdefs.Invalid("network pool %q is not a CIDR: %v", cidr, err)
	}
	if !p.Addr().Is4() || p.Bits() < 8 || p.Bits() > 29 {
		return nil, errdefs.Invalid("network pool %q must be an IPv4 prefix between /8 and /29", cidr)
	}
	return &Pool{base: p.Masked(), count: 1 << (30 - p.Bits()), used: map[int]string{}, byID: map[string]int{}}, nil
}

// Size is the number of subnets the pool holds.
func (p *Pool) Size() int { return p.count }

// Allocate returns id's subnet, reserving a free one on first use.
func (p *Pool) Allocate(id string) (Subnet, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byID[id]; ok {
		return p.block(i), nil
	}
	for n := 0; n < p.count; n++ {
		i := (p.hint + n) % p.count
		if _, taken := p.used[i]; !taken {
			p.used[i], p.byID[id] = id, i
			p.hint = i + 1
			return p.block(i), nil
		}
	}
	return Subnet{}, errdefs.Exhausted("network pool %s is full (%d sandboxes); destroy some or configure a larger pool", p.base, p.count)
}

// Restore reserves s for id, as recorded before a restart. It fails if s
// is outside the pool, misaligned or held by another id.
func (p *Pool) Restore(id string, s Subnet) error {
	i, err := p.index(s.Prefix)
	if err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if other, taken := p.used[i]; taken && other != id {
		return errdefs.New(errdefs.ErrAlreadyExists, "subnet %s of sandbox %s is already held by sandbox %s", s.Prefix, id, other)
	}
	if old, ok := p.byID[id]; ok && old != i {
		delete(p.used, old)
	}
	p.used[i], p.byID[id] = id, i
	return nil
}

// Release returns id's subnet to the pool; unknown ids are ignored.
func (p *Pool) Release(id string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if i, ok := p.byID[id]; ok {
		delete(p.used, i)
		delete(p.byID, id)
	}
}

// InUse is the number of reserved subnets.
func (p *Pool) InUse() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.used)
}

func (p *Pool) block(i int) Subnet {
	b := p.base.Addr().As4()
	v := uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	v += uint32(i) * 4
	at := func(off uint32) netip.Addr {
		x := v + off
		return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
	}
	return Subnet{Prefix: netip.PrefixFrom(at(0), 30), Gateway: at(1), Addr: at(2)}
}

func (p *Pool) index(s netip.Prefix) (int, error) {
	if s.Bits() != 30 || !p.base.Contains(s.Addr()) || s.Masked() != s {
		return 0, errdefs.Invalid("subnet %s is not a /30 of the pool %s", s, p.base)
	}
	a, b := s.Addr().As4(), p.base.Addr().As4()
	off := (uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3])) -
		(uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3]))
	return int(off / 4), nil
}

// String describes the pool.
func (p *Pool) String() string { return fmt.Sprintf("%s (%d subnets)", p.base, p.count) }
