package sandbox

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// hasEgress reports whether n gives the sandbox a veth.
func hasEgress(n *api.Network) bool {
	return n != nil && n.Egress != "" && n.Egress != api.EgressNone
}

// checkNetAvailable refuses egress when this daemon has no network
// manager (networking failed to start).
func (s *Service) checkNetAvailable(n *api.Network) error {
	if hasEgress(n) && s.net == nil {
		return errdefs.Precondition("egress %q is not available: this daemon's networking did not start (see its log); use egress %q", n.Egress, api.EgressNone)
	}
	return nil
}

// attachNet gives a freshly started init (h) its veth, address and rules
// when rec has egress, and records a newly allocated address in rec and
// the store.
func (s *Service) attachNet(ctx context.Context, rec *store.SandboxRecord, h *driver.Handle) error {
	n := rec.Spec.Network
	if !hasEgress(n) {
		return nil
	}
	if s.net == nil {
		return s.checkNetAvailable(n)
	}
	pol, err := network.ParsePolicy(n.Egress, n.Allow, n.Deny)
	if err != nil {
		return err
	}
	var sub network.Subnet
	if n.Address != "" {
		if sub, err = network.SubnetOf(n.Address); err != nil {
			return err
		}
	}
	t0 := time.Now()
	got, err := s.net.Attach(rec.ID, h.Pid, pol, sub, netLimits(n))
	if err != nil {
		return err
	}
	s.log.Debug("network attached", "sandbox", rec.ID, "address", got.String(), "took", time.Since(t0))
	if drv := s.drivers[rec.Isolation]; drv != nil && h.Socket != "" { // no guest yet: netAttach.after
		if err := writeResolvConf(ctx, drv, h, got); err != nil {
			s.log.Warn("pointing the sandbox's /etc/resolv.conf at its resolver", "sandbox", rec.ID, "err", err)
		}
	}
	if got != sub {
		n.Address = got.String()
		err := s.st.UpdateSandbox(ctx, rec.ID, func(r *store.SandboxRecord) error {
			if r.Spec.Network != nil {
				r.Spec.Network.Address = n.Address
			}
			return nil
		})
		if err != nil {
			_ = s.detachNet(rec.ID)
			return fmt.Errorf("recording the sandbox's address: %w", err)
		}
	}
	return nil
}

// detachNet removes sandbox id's veth and rules and frees its address.
func (s *Service) detachNet(id string) error {
	if s.net != nil && !s.net.Attached(id) {
		// Egress none: nothing of it on the host to look for (each look
		// is a netlink or nftables round trip), but a prepared namespace.
		return network.RemoveNetNS(s.netnsPath(id))
	}
	defer s.releaseNetExtras(id) // prepared namespace, upload shaper (netlimits.go)
	if s.net == nil {
		return nil
	}
	return s.net.Detach(id)
}

// SetEgress changes a sandbox's egress policy (egress, allow, deny of req;
// its preview settings are kept). A running sandbox's new connections see
// the change at once; a stopped one gets it when it starts.
func (s *Service) SetEgress(ctx context.Context, scope tenancy.Scope, id string, req *api.Network) (*api.Sandbox, error) {
	if req == nil {
		return nil, errdefs.Invalid("send the network settings: {\"egress\": ..., \"allow\": [...], \"deny\": [...]}")
	}
	if req.Preview != "" || req.PreviewToken != "" || req.PreviewDomain != "" || req.Address != "" {
		return nil, errdefs.Invalid("only network.egress, network.allow, network.deny, network.max_connections and network.bandwidth_mbit can change; leave the preview fields and address out")
	}
	want, err := resolveNetwork(s.cfg, &api.Network{Egress: req.Egress, Allow: req.Allow, Deny: req.Deny})
	if err != nil {
		return nil, err
	}
	if err := resolveLimits(s.cfg, &api.Network{Egress: want.Egress, MaxConnections: req.MaxConnections, BandwidthMbit: req.BandwidthMbit}); err != nil {
		return nil, err
	}
	if err := s.checkNetAvailable(want); err != nil {
		return nil, err
	}
	rec, err := s.visible(ctx, scope, id)
	if err != nil {
		return nil, err
	}
	if drv := s.drivers[rec.Isolation]; drv != nil && want.Egress != api.EgressNone {
		if err := driver.Refuses(drv, driver.OpNetwork); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	e := s.live[id]
	s.mu.Unlock()
	if e != nil {
		e.op.Lock()
		defer e.op.Unlock()
		if e.destroying {
			return nil, errdefs.Precondition("sandbox %s is being destroyed", id)
		}
	} else if rec.State != api.StateStopped {
		return nil, errdefs.Precondition("sandbox %s is %s; only a running, paused or stopped sandbox's egress can change", id, rec.State)
	}
	if rec, err = s.st.GetSandbox(ctx, id); err != nil {
		return nil, err
	}
	old := rec.Spec.Network
	if old == nil {
		old = &api.Network{Egress: api.EgressNone, Preview: api.PreviewTokenMode}
	}
	next := *old
	next.Egress, next.Allow, next.Deny = want.Egress, want.Allow, want.Deny
	nextLimits(&next, old, req, want)
	if err := checkEgressChange(e, id, old, &next); err != nil {
		return nil, err
	}
	switch {
	case !hasEgress(&next):
		next.Address = ""
		if hasEgress(old) {
			if err := s.detachNet(id); err != nil {
				return nil, err
			}
		}
	case e != nil && hasEgress(old) && old.Address != "":
		pol, _ := network.ParsePolicy(next.Egress, next.Allow, next.Deny)
		if err := s.net.SetPolicy(id, pol); err != nil {
			return nil, err
		}
	case e != nil:
		// From none (or never attached): a veth now.
		tmp := *rec
		tmp.Spec.Network = &next
		if err := s.attachNet(ctx, &tmp, e.handle()); err != nil {
			return nil, err
		}
	}
	if err := s.setNetLimits(e, id, old, &next); err != nil {
		return nil, err
	}
	var out *store.SandboxRecord
	err = s.st.UpdateSandbox(ctx, id, func(r *store.SandboxRecord) error {
		n := next
		if r.Spec.Network != nil && hasEgress(&n) && n.Address == "" {
			n.Address = r.Spec.Network.Address // set by attachNet just now
		}
		r.Spec.Network = &n
		out = r
		return nil
	})
	if err != nil {
		return nil, err
	}
	s.log.Info("egress changed", "sandbox", id, "egress", next.Egress, "allow", next.Allow, "deny", next.Deny)
	return toAPI(out), nil
}

// netKnown lists the sandboxes a restarted daemon keeps whose network
// stays: their policies and recorded subnets.
func netKnown(recs []*store.SandboxRecord, keep map[string]bool) map[string]network.Known {
	known := map[string]network.Known{}
	for _, r := range recs {
		n := r.Spec.Network
		if !keep[r.ID] || !hasEgress(n) || n.Address == "" {
			continue
		}
		sub, err := network.SubnetOf(n.Address)
		if err != nil {
			continue
		}
		pol, err := network.ParsePolicy(n.Egress, n.Allow, n.Deny)
		if err != nil {
			continue
		}
		known[r.ID] = network.Known{Policy: pol, Subnet: sub}
	}
	return known
}
