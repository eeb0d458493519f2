package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// BuildIsolation is the tier build steps run on.
const BuildIsolation = "container"

// BuildBox is a sandbox that runs template build steps (internal/build).
// It has no store record and belongs to no tenant: nothing lists it, and a
// daemon restart cleans up whatever a crash left of it (layers, run dirs
// and driver leftovers with no record go at Start).
type BuildBox struct {
	s  *Service
	e  *entry
	id string
	// booted is what Close releases (booted.go).
	booted *booted
	// With egress: the template's own /etc/resolv.conf (nil: it had
	// none), put back before the layer is committed.
	resolv    []byte
	hadResolv bool
	netOn     bool
}

// NewBuildBox starts a sandbox of the container tier on lowers (top
// first) with the given defaults and the daemon's largest resource
// limits. egress is api.EgressNone ("" too) or api.EgressInternet.
func (s *Service) NewBuildBox(ctx context.Context, lowers []string, env map[string]string, user, egress string) (*BuildBox, error) {
	if egress != "" && egress != api.EgressNone && egress != api.EgressInternet {
		return nil, errdefs.Invalid("a build's network must be %q or %q, got %q", api.EgressNone, api.EgressInternet, egress)
	}
	if egress == api.EgressInternet && s.net == nil {
		return nil, errdefs.Precondition("network internet is not available to builds: this daemon's networking did not start (see its log)")
	}
	drv, ok := s.drivers[BuildIsolation]
	if !ok {
		return nil, errdefs.Precondition("template builds run on the %s tier, which this daemon does not run", BuildIsolation)
	}
	lim, def := s.cfg.Limits, s.cfg.Defaults
	res := api.Resources{CPU: lim.CPU, MemoryMB: lim.MemoryMB, DiskMB: lim.DiskMB, Pids: lim.Pids}
	if res.CPU <= 0 {
		res.CPU = def.CPU
	}
	if res.MemoryMB <= 0 {
		res.MemoryMB = def.MemoryMB
	}
	if res.DiskMB <= 0 {
		res.DiskMB = def.DiskMB
	}
	if res.Pids <= 0 {
		res.Pids = def.Pids
	}
	rec := &store.SandboxRecord{
		ID:        s.newID(),
		State:     api.StateCreating,
		Isolation: BuildIsolation,
		Resources: res,
		CreatedAt: time.Now().UTC(),
		Lowers:    lowers,
	}
	tpl := &storage.Template{Env: env, User: user}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
	defer cancel()
	bt, err := s.boot(cctx, rec, tpl, drv, false)
	if err != nil {
		return nil, fmt.Errorf("starting a build sandbox: %w", err)
	}
	b := &BuildBox{s: s, e: s.newEntry(rec.ID, "", drv, bt.h), id: rec.ID, booted: bt}
	if egress == api.EgressInternet {
		if err := b.connect(cctx, drv, bt.h); err != nil {
			_ = b.Close()
			return nil, fmt.Errorf("connecting the build sandbox's network: %w", err)
		}
	}
	return b, nil
}

// connect gives the box a veth with egress internet (as a warm pool
// member gets one: no record holds the address, and recovery removes
// veths of no sandbox) and points /etc/resolv.conf at its resolver,
// keeping the template's own to put back before the commit.
func (b *BuildBox) connect(ctx context.Context, drv driver.Driver, h *driver.Handle) error {
	pol, err := network.ParsePolicy(api.EgressInternet, nil, nil)
	if err != nil {
		return err
	}
	sub, err := b.s.net.Attach(b.id, h.Pid, pol, network.Subnet{}, network.Limits{})
	if err != nil {
		return err
	}
	b.netOn = true
	b.resolv, err = guestclient.New(b.e.guest).ReadFile(ctx, "/etc/resolv.conf", 1<<20)
	switch {
	case err == nil:
		b.hadResolv = true
	case errors.Is(err, errdefs.ErrNotFound):
	case guestclient.Unreachable(err):
		return buildErr(err)
	default:
		return fmt.Errorf("reading the template's /etc/resolv.conf: %w", err)
	}
	return writeResolvConf(ctx, drv, h, sub)
}

// restoreResolv puts the template's /etc/resolv.conf back (or removes
// the one connect wrote), so that the layer does not keep the build's
// resolver address.
func (b *BuildBox) restoreResolv(ctx context.Context) error {
	if !b.netOn {
		return nil
	}
	c := guestclient.New(b.e.guest)
	var err error
	if b.hadResolv {
		err = c.WriteFile(ctx, "/etc/resolv.conf", bytes.NewReader(b.resolv), guestclient.WriteOptions{Mode: "0644", User: "root"})
	} else if err = c.DeleteFile(ctx, "/etc/resolv.conf"); errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	return buildErr(err)
}

// buildErr says which sandbox a guest agent that could not be reached
// belongs to.
func buildErr(err error) error {
	if guestclient.Unreachable(err) {
		return fmt.Errorf("build sandbox: %w", err)
	}
	return err
}

// ID is the box's sandbox id (its writable layer's name in the pool).
func (b *BuildBox) ID() string { return b.id }

// Close destroys the box and its writable layer.
func (b *BuildBox) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b.e.guest.CloseIdleConnections()
	return b.booted.Release(ctx)
}

// Stop kills every process in the box (its init too) but keeps its
// writable layer, so that the layer can be committed with nothing
// writing to it. Close still has to be called.
func (b *BuildBox) Stop() error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.restoreResolv(ctx); err != nil {
		return fmt.Errorf("putting the template's /etc/resolv.conf back: %w", err)
	}
	b.e.guest.CloseIdleConnections()
	return b.e.drv.Destroy(ctx, b.e.handle())
}

// Run starts req in the box and streams its output to out (stream is
// "stdout" or "stderr") until it exits; it returns the exit code.
func (b *BuildBox) Run(ctx context.Context, req api.StartProcessRequest, out func(stream string, data []byte)) (int, error) {
	return guestclient.New(b.e.guest).RunProcess(ctx, req, out)
}

// PutArchive extracts the tar stream r under dir in the box, owned by user.
func (b *BuildBox) PutArchive(ctx context.Context, dir, user string, r io.Reader) error {
	return buildErr(guestclient.New(b.e.guest).PutArchive(ctx, dir, r, guestclient.WriteOptions{User: user}))
}

// GCLayers removes the build layers that no template version, sandbox or
// snapshot uses.
func (s *Service) GCLayers(ctx context.Context) ([]string, error) {
	inUse := map[string]bool{}
	recs, err := s.st.ListSandboxes(ctx, store.Filter{Scope: tenancy.AllTenants()})
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.State == api.StateDestroyed || r.State == api.StateFailed {
			continue
		}
		for _, l := range r.Lowers {
			inUse[l] = true
		}
	}
	snaps, err := s.st.ListSnapshots(ctx, tenancy.AllTenants())
	if err != nil {
		return nil, err
	}
	for _, sn := range snaps {
		for _, l := range sn.Lowers {
			inUse[l] = true
		}
	}
	for _, l := range s.warm.lowers() { // warm pool sandboxes (warmpool.go)
		inUse[l] = true
	}
	return s.pool.GCLayers(ctx, inUse)
}

// sameLowers reports whether two overlay lower lists are the same.
func sameLowers(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
