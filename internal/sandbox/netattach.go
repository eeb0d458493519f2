package sandbox

import (
	"context"
	"path/filepath"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/store"
)

// netAttach connects one new sandbox's network (veth, address, routes,
// egress rules, limits, and /etc/resolv.conf pointing at its resolver)
// around its driver's Create. How depends on what the tier allows, and is
// chosen once per boot by netAttachFor:
//
//   - noNet: a sandbox without egress has nothing to connect;
//   - preparedNet: a tier whose network is fixed when it starts
//     (driver.NetNSAtCreate: gvisor) gets a namespace made and connected
//     before Create (spec.NetNS), and only resolv.conf after;
//   - earlyNet: a tier that reports its init's pid as soon as it exists
//     (driver.StartNotifier: container) is connected from spec.Started,
//     overlapping the guest's boot, which writes resolv.conf itself;
//   - afterNet: any other tier is connected once Create returned.
//
// boot calls before, then the driver's Create, then after; undo instead
// of after when Create failed. Each releases what it made when it fails.
type netAttach interface {
	// before runs ahead of the driver's Create and may fill spec.
	before(ctx context.Context, spec *driver.Spec) error
	// after connects, or finishes connecting, the started sandbox h.
	after(ctx context.Context, h *driver.Handle) error
	// undo releases what before (and an attach from Started) made, after
	// the driver's Create failed.
	undo()
}

// netAttachFor picks how rec's network is connected on drv.
func (s *Service) netAttachFor(rec *store.SandboxRecord, drv driver.Driver) netAttach {
	switch {
	case !hasEgress(rec.Spec.Network):
		return noNet{}
	case driver.Has[driver.NetNSAtCreate](drv):
		return &preparedNet{s: s, rec: rec}
	case driver.Has[driver.StartNotifier](drv) && s.net != nil:
		return &earlyNet{s: s, rec: rec}
	}
	return afterNet{s: s, rec: rec}
}

// noNet is a sandbox without egress: no interface but loopback.
type noNet struct{}

func (noNet) before(context.Context, *driver.Spec) error  { return nil }
func (noNet) after(context.Context, *driver.Handle) error { return nil }
func (noNet) undo()                                       {}

// afterNet connects the sandbox once its driver's Create returned: the
// init's namespace, then (its guest answering) resolv.conf.
type afterNet struct {
	s   *Service
	rec *store.SandboxRecord
}

func (afterNet) before(context.Context, *driver.Spec) error { return nil }
func (a afterNet) after(ctx context.Context, h *driver.Handle) error {
	return a.s.attachNet(ctx, a.rec, h)
}
func (afterNet) undo() {}

// netnsPath is where a prepared network namespace of sandbox id is pinned.
func (s *Service) netnsPath(id string) string { return filepath.Join(s.runDir(id), "netns") }

// preparedNet makes the sandbox's network namespace before the driver
// starts it: pinned in its run dir, holding the veth, address, route,
// rules and limits (attachNet, with a thread in the namespace standing in
// for the init), and named in spec.NetNS.
type preparedNet struct {
	s        *Service
	rec      *store.SandboxRecord
	prepared bool
}

func (p *preparedNet) before(ctx context.Context, spec *driver.Spec) error {
	s, rec := p.s, p.rec
	if err := s.checkNetAvailable(rec.Spec.Network); err != nil {
		return err
	}
	path := s.netnsPath(rec.ID)
	err := network.NewNetNS(path, func(pid int) error {
		return s.attachNet(ctx, rec, &driver.Handle{ID: rec.ID, Pid: pid})
	})
	if err != nil {
		return err
	}
	spec.NetNS, p.prepared = path, true
	return nil
}

// after points the sandbox's /etc/resolv.conf at its resolver, now that
// its guest answers.
func (p *preparedNet) after(ctx context.Context, h *driver.Handle) error {
	sub, err := network.SubnetOf(p.rec.Spec.Network.Address)
	if err != nil {
		return err
	}
	p.s.pointResolvConf(ctx, p.rec, h, sub)
	return nil
}

func (p *preparedNet) undo() {
	if p.prepared {
		_ = p.s.detachNet(p.rec.ID)
	}
}

// pointResolvConf writes rec's /etc/resolv.conf, naming the resolver of
// sub; a failure is logged (the sandbox runs, with names unresolved).
func (s *Service) pointResolvConf(ctx context.Context, rec *store.SandboxRecord, h *driver.Handle, sub network.Subnet) {
	drv := s.drivers[rec.Isolation]
	if drv == nil {
		return
	}
	if err := writeResolvConf(ctx, drv, h, sub); err != nil {
		s.log.Warn("pointing the sandbox's /etc/resolv.conf at its resolver", "sandbox", rec.ID, "err", err)
	}
}

// earlyNet connects the sandbox from the driver's Started callback, in
// the new init's namespace, overlapping the rest of the create and the
// guest's boot. The subnet is reserved in before, so that the driver
// writes /etc/resolv.conf at boot (spec.ResolvConf) and the guest
// answers with it in place. A later Started, for an init that replaces
// one found gone, attaches again once the earlier attach ended: Attach
// replaces the chain and the veth of the same sandbox. When no subnet
// could be reserved, or the driver never called Started, after connects
// the sandbox as afterNet does.
type earlyNet struct {
	s   *Service
	rec *store.SandboxRecord
	// done closes when the latest attach ends, err (set before) its
	// outcome; nil until Started. Only the create's goroutine, which
	// calls Started and then wait, reads or sets done.
	done chan struct{}
	err  error
	// sub is the subnet reserved before Create (allocated: by before,
	// released when the attach never took it).
	sub       network.Subnet
	allocated bool
}

func (en *earlyNet) before(ctx context.Context, spec *driver.Spec) error {
	s, rec := en.s, en.rec
	var err error
	if n := rec.Spec.Network; n.Address != "" {
		en.sub, err = network.SubnetOf(n.Address)
	} else {
		// Attach (network.Pool.Allocate) then finds id's reservation.
		en.sub, err = s.net.Pool().Allocate(rec.ID)
		en.allocated = err == nil
	}
	if err != nil {
		return nil // no early attach: after's attachNet reports it
	}
	spec.ResolvConf = resolvConf(en.sub)
	spec.Started = func(pid int) {
		en.start(func() error {
			// No socket in the handle: resolv.conf waits for the guest.
			return s.attachNet(ctx, rec, &driver.Handle{ID: rec.ID, Pid: pid})
		})
	}
	return nil
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
// Started, so the network is still to attach.
func (en *earlyNet) wait() (ran bool, err error) {
	if en.done == nil {
		return false, nil
	}
	<-en.done
	return true, en.err
}

func (en *earlyNet) after(ctx context.Context, h *driver.Handle) (err error) {
	s, rec := en.s, en.rec
	ran, err := en.wait()
	if err != nil {
		if en.allocated {
			s.net.Pool().Release(rec.ID)
		}
		return err
	}
	if !ran {
		if en.allocated {
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
	if sub != en.sub {
		s.pointResolvConf(ctx, rec, h, sub)
	} // else the driver wrote /etc/resolv.conf at boot
	return nil
}

// undo waits for the early attach and removes what it made (a failed
// attachNet leaves nothing itself).
func (en *earlyNet) undo() {
	ran, err := en.wait()
	switch {
	case ran && err == nil:
		if err := en.s.detachNet(en.rec.ID); err != nil {
			en.s.log.Warn("detaching the network of a sandbox that failed to start", "sandbox", en.rec.ID, "err", err)
		}
	case en.allocated: // a failed attach may not have reached Attach
		en.s.net.Pool().Release(en.rec.ID)
	}
}
