package network

import (
	"sync/atomic"

	"github.com/agentbox/agentbox/api"
)

// egressCounts counts every egress decision logged (resolver, proxy and
// firewall), by kind and verdict, since the daemon started: the metrics'
// egress allows and denies.
type egressCounts struct {
	dnsAllow, dnsDeny, connAllow, connDeny atomic.Int64
}

func (c *egressCounts) note(e *api.EgressLogEntry) {
	if c == nil {
		return
	}
	switch {
	case e.Kind == api.EgressKindDNS && e.Verdict == api.VerdictAllow:
		c.dnsAllow.Add(1)
	case e.Kind == api.EgressKindDNS:
		c.dnsDeny.Add(1)
	case e.Verdict == api.VerdictAllow:
		c.connAllow.Add(1)
	default:
		c.connDeny.Add(1)
	}
}

// EgressDecision is one count of EgressDecisions.
type EgressDecision struct {
	Kind, Verdict string // api.EgressKind*, api.Verdict*
	Count         int64
}

// EgressDecisions returns how many egress decisions of each kind and
// verdict every sandbox's log has recorded since the daemon started.
func (m *Manager) EgressDecisions() []EgressDecision {
	c := &m.counts
	return []EgressDecision{
		{api.EgressKindDNS, api.VerdictAllow, c.dnsAllow.Load()},
		{api.EgressKindDNS, api.VerdictDeny, c.dnsDeny.Load()},
		{api.EgressKindConnect, api.VerdictAllow, c.connAllow.Load()},
		{api.EgressKindConnect, api.VerdictDeny, c.connDeny.Load()},
	}
}

// SubnetsFree is how many sandbox subnets the pool has left.
func (m *Manager) SubnetsFree() int { return m.pool.Size() - m.pool.InUse() }
