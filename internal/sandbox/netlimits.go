package sandbox

import (
	"context"
	"path/filepath"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/store"
)

// Per-sandbox connection and bandwidth limits (network.max_connections,
// network.bandwidth_mbit; enforced by internal/network/limits.go), and the
// network namespace prepared before create for tiers whose network is
// fixed at start (driver.NetNSAtCreate: gvisor).

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

// netnsPath is where a prepared network namespace of sandbox id is pinned.
func (s *Service) netnsPath(id string) string { return filepath.Join(s.runDir(id), "netns") }

// prepareNetNS gives a sandbox with egress on a NetNSAtCreate tier its
// network before the driver starts it: a namespace pinned in its run dir
// holding the veth, address, route, rules and limits (attachNet, with a
// thread in the namespace standing in for the init), named in spec.NetNS.
func (s *Service) prepareNetNS(ctx context.Context, rec *store.SandboxRecord, drv driver.Driver, spec *driver.Spec) error {
	n := rec.Spec.Network
	if !hasEgress(n) || !driver.Has[driver.NetNSAtCreate](drv) {
		return nil
	}
	if err := s.checkNetAvailable(n); err != nil {
		return err
	}
	path := s.netnsPath(rec.ID)
	err := network.NewNetNS(path, func(pid int) error {
		return s.attachNet(ctx, rec, &driver.Handle{ID: rec.ID, Pid: pid})
	})
	if err != nil {
		return err
	}
	spec.NetNS = path
	return nil
}

// unprepareNetNS undoes prepareNetNS after a failed create.
func (s *Service) unprepareNetNS(id string, spec *driver.Spec) {
	if spec.NetNS != "" {
		_ = s.detachNet(id)
	}
}

// earlyNet is a network attach started from the driver's Started
// callback, overlapping the rest of the create and the guest's boot.
type earlyNet struct {
	// done closes when the latest attach ends, err (set before) its
	// outcome; nil until Started. Only the create's goroutine, which
	// calls Started and then wait, reads or sets done.
	done chan struct{}
	err  error
	// sub is the subnet reserved before Create (allocated: by
	// attachNetEarly, released by undo when the attach never ran), whose
	// resolver the driver writes into /etc/resolv.conf at boot.
	sub       network.Subnet
	allocated bool
}

// attachNetEarly sets spec.Started, for a sandbox with egress whose
// network is not prepared before create (spec.NetNS), so that a driver
// that calls it starts attachNet (veth, address, rules, limits) in the
// new init's namespace while the create goes on. A later call, for an
// init that replaces one found gone, attaches again once the earlier
// attach ended: Attach replaces the chain and the veth of the same
// sandbox. The subnet is reserved now, so that the same driver writes
// /etc/resolv.conf at boot (spec.ResolvConf) and the guest answers with
// it in place. It returns nil when there is nothing to attach early.
func (s *Service) attachNetEarly(ctx context.Context, rec *store.SandboxRecord, spec *driver.Spec) *earlyNet {
	n := rec.Spec.Network
	if spec.NetNS != "" || !hasEgress(n) || s.net == nil {
		return nil
	}
	en := &earlyNet{}
	var err error
	if n.Address != "" {
		en.sub, err = network.SubnetOf(n.Address)
	} else {
		// Attach (network.Pool.Allocate) then finds id's reservation.
		en.sub, err = s.net.Pool().Allocate(rec.ID)
		en.allocated = err == nil
	}
	if err != nil {
		return nil // attachNet after Create reports it
	}
	spec.ResolvConf = resolvConf(en.sub)
	spec.Started = func(pid int) {
		en.start(func() error {
			// No socket in the handle: resolv.conf waits for the guest.
			return s.attachNet(ctx, rec, &driver.Handle{ID: rec.ID, Pid: pid})
		})
	}
	return en
}

// start runs attach in a goroutine once the attach started before it (if
// any) ended, whose init is gone: the latest attach's outcome is wait's.
func (en *earlyNet) start(attach func() error) {
	prev, done := en.done, make(chan struct{})
	en.done = done
	go func() {
		defer close(done)
		if prev != nil {
			<-prev
		}
		en.err = attach()
	}()
}

// wait joins the early attach; ran is false when the driver never called
// Started (nil en too), so the network is still to attach.
func (en *earlyNet) wait() (ran bool, err error) {
	if en == nil || en.done == nil {
		return false, nil
	}
	<-en.done
	return true, en.err
}

// undo, after a failed Create, waits for the early attach and removes
// what it made (a failed attachNet leaves nothing itself).
func (en *earlyNet) undo(s *Service, id string) {
	ran, err := en.wait()
	switch {
	case ran && err == nil:
		if err := s.detachNet(id); err != nil {
			s.log.Warn("detaching the network of a sandbox that failed to start", "sandbox", id, "err", err)
		}
	case en != nil && en.allocated: // a failed attach may not have reached Attach
		s.net.Pool().Release(id)
	}
}

// attachNetAfter connects a freshly started sandbox; when its network was
// prepared before (spec.NetNS) or attached while it booted (early), only
// its /etc/resolv.conf is left to write, now that its guest answers.
func (s *Service) attachNetAfter(ctx context.Context, rec *store.SandboxRecord, h *driver.Handle, spec *driver.Spec, early *earlyNet) (err error) {
	ran, err := early.wait()
	if err != nil {
		if early.allocated {
			s.net.Pool().Release(rec.ID)
		}
		return err
	}
	if spec.NetNS == "" && !ran {
		if early != nil && early.allocated {
			defer func() { // attachNet holds it now, or let it go on error
				if err != nil {
					s.net.Pool().Release(rec.ID)
				}
			}()
		}
		return s.attachNet(ctx, rec, h)
	}
	sub, err := network.SubnetOf(rec.Spec.Network.Address)
	if err != nil {
		return err
	}
	if ran && sub == early.sub {
		return nil // the driver wrote /etc/resolv.conf at boot
	}
	if drv := s.drivers[rec.Isolation]; drv == nil {
		return nil
	} else if err := writeResolvConf(ctx, drv, h, sub); err != nil {
		s.log.Warn("pointing the sandbox's /etc/resolv.conf at its resolver", "sandbox", rec.ID, "err", err)
	}
	return nil
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
