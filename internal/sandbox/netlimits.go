package sandbox

import (
	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/store"
)

// Per-sandbox connection and bandwidth limits (network.max_connections,
// network.bandwidth_mbit; enforced by internal/network/limits.go). How a
// new sandbox's network is connected is netattach.go.

// noLimit is how a sandbox's network settings show "no limit".
const noLimit = -1

// checkLimit validates a requested limit: 0 (default), -1 (none) or 1..max.
func checkLimit(key string, v, maxV int) error {
	if v < noLimit || v > maxV {
		return errdefs.Invalid("network.%s must be between 1 and %d, or -1 for no limit (0 or absent: the daemon's default), got %d", key, maxV, v)
	}
	return nil
}

// resolveLimits checks n's limits and fills the daemon's defaults: with
// egress internet or custom every limit ends up > 0 or noLimit. Egress
// none has no limits to set.
func resolveLimits(cfg *config.Config, n *api.Network) error {
	if err := checkLimit("max_connections", n.MaxConnections, config.MaxConnectionsLimit); err != nil {
		return err
	}
	if err := checkLimit("bandwidth_mbit", n.BandwidthMbit, config.BandwidthMbitLimit); err != nil {
		return err
	}
	if !hasEgress(n) {
		if n.MaxConnections != 0 || n.BandwidthMbit != 0 {
			return errdefs.Invalid("network.max_connections and network.bandwidth_mbit need egress %q or %q; egress %q has no connections to limit", api.EgressInternet, api.EgressCustom, api.EgressNone)
		}
		return nil
	}
	fill := func(v *int, def int) {
		if *v == 0 {
			*v = def
			if def <= 0 {
				*v = noLimit
			}
		}
	}
	fill(&n.MaxConnections, cfg.Network.MaxConnections)
	fill(&n.BandwidthMbit, cfg.Network.BandwidthMbit)
	return nil
}

// netLimits are n's limits in the form the network manager takes (a
// record from before limits existed has none).
func netLimits(n *api.Network) network.Limits {
	if n == nil {
		return network.Limits{}
	}
	return network.Limits{MaxConnections: max(n.MaxConnections, 0), BandwidthMbit: max(n.BandwidthMbit, 0)}
}

// nextLimits sets next's limits for an egress change: what req asks for,
// else what the sandbox had, else (egress newly on) def's defaults.
func nextLimits(next, old, req, def *api.Network) {
	if !hasEgress(next) {
		next.MaxConnections, next.BandwidthMbit = 0, 0
		return
	}
	pick := func(r, o, d int) int {
		switch {
		case r != 0:
			return r
		case o != 0:
			return o
		}
		return d
	}
	if !hasEgress(old) {
		old = &api.Network{}
	}
	next.MaxConnections = pick(req.MaxConnections, old.MaxConnections, def.MaxConnections)
	next.BandwidthMbit = pick(req.BandwidthMbit, old.BandwidthMbit, def.BandwidthMbit)
}

// setNetLimits applies next's limits to a running sandbox whose egress
// stays on (one that gains it gets them from attachNet).
func (s *Service) setNetLimits(e *entry, id string, old, next *api.Network) error {
	if e == nil || s.net == nil || !hasEgress(old) || !hasEgress(next) {
		return nil
	}
	if netLimits(old) == netLimits(next) {
		return nil
	}
	return s.net.SetLimits(id, netLimits(next))
}

// restoreNetLimits re-applies the limits of the sandboxes a restarted
// daemon keeps (network.Manager.Start rebuilt the table without them) and
// removes the upload shapers of the others.
func (s *Service) restoreNetLimits(recs []*store.SandboxRecord, keep map[string]bool) {
	for _, name := range s.net.CleanupLimits(keep) {
		s.log.Info("cleaned up leftover", "what", "shaper "+name)
	}
	for id := range netKnown(recs, keep) {
		for _, r := range recs {
			if r.ID == id {
				if err := s.net.SetLimits(id, netLimits(r.Spec.Network)); err != nil {
					s.log.Warn("restoring the sandbox's network limits", "sandbox", id, "err", err)
				}
			}
		}
	}
}

// checkEgressChange refuses, on a running sandbox of a tier whose network
// is fixed at start, a change that would add or remove its interface.
func checkEgressChange(e *entry, id string, old, next *api.Network) error {
	if e == nil || !driver.Has[driver.NetNSAtCreate](e.drv) || hasEgress(old) == hasEgress(next) {
		return nil
	}
	return errdefs.Precondition("sandbox %s runs on the %s tier, whose network interface is fixed when it starts: egress can change between %q and %q while it runs, not to or from %q; stop it first (or use %q with no allow rules to block everything)",
		id, e.drv.Name(), api.EgressInternet, api.EgressCustom, api.EgressNone, api.EgressCustom)
}

// releaseNetExtras releases what a sandbox's network holds besides its
// veth and rules: a namespace prepared before create, the ifb device of
// its upload shaping.
func (s *Service) releaseNetExtras(id string) {
	if err := network.RemoveNetNS(s.netnsPath(id)); err != nil {
		s.log.Warn("network namespace left behind", "sandbox", id, "err", err)
	}
	if s.net != nil {
		if err := s.net.ReleaseLimits(id); err != nil {
			s.log.Warn("upload shaper left behind", "sandbox", id, "err", err)
		}
	}
}
