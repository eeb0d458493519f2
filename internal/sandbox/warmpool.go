package sandbox

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/config"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/network"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/store"
)

// Warm pools ([[pool]] in the config). Each pool keeps its size of
// sandboxes booted ahead of time: layer, cgroups, init and guest agent
// running, and for egress "internet" the veth, address and firewall chain
// ready. A create request that matches a pool claims one of them instead
// of booting: the member's id becomes the sandbox's id (nobody has seen it
// before, and its hostname is sbx-<id> already), the request's limits are
// set on its cgroups when they differ, its env is given to its agent
// (proto.SetEnv), its egress rules are swapped in, and everything
// else a request sets (metadata, TTL, on_timeout, idle timeout,
// auto_resume, preview access) is the daemon's record, written as for any
// create.
//
// Members live only in memory: they have no store record until claimed,
// so a restarted daemon finds their cgroups, layers, veths and run dirs
// unknown and cleans them up like any leftover, and Close destroys them.
// A claimed member leaves the pool at once and is either handed out or,
// if the request fails before its sandbox is recorded, put back (nothing
// has run in it). Refills run one at a time in the background and wait
// while creates are in flight, cold or served from a pool, so the pool
// never competes with a request for the CPU.

// warmPools is the service's set of pools: a collaborator of the
// service that reaches it only through host (warmHost).
type warmPools struct {
	host warmHost
	log  *slog.Logger
	// stop closes when the service closes; wg counts the filler.
	stop <-chan struct{}
	wg   *sync.WaitGroup

	mu    sync.Mutex
	pools []*warmPool
	// claimed are members taken by a create still in flight, by id.
	claimed map[string]*member
	closed  bool

	kick    chan struct{} // wakes the filler
	filling bool          // the filler runs (guarded by mu)
	// busy counts creates in flight; refills wait for it to be zero, and
	// the last create to finish wakes the filler.
	busy atomic.Int64
}

// warmHost is what the warm pools need of the service: boot a member
// (what Create would, with no record), fit one to a create's record, and
// the current version of a template. *Service is the one the daemon uses.
type warmHost interface {
	// bootMember boots a sandbox for a pool of config c; the pool sets
	// the member's pool.
	bootMember(c config.WarmPool) (*member, error)
	// fitMember gives m rec's limits, env and egress policy.
	fitMember(ctx context.Context, m *member, rec *store.SandboxRecord) error
	// templateVersion is the current version of template name, "" if
	// it is gone.
	templateVersion(name string) string
}

var _ warmHost = (*Service)(nil)

// warmPool is one [[pool]] entry and its ready members.
type warmPool struct {
	cfg   config.WarmPool
	ready []*member // guarded by warmPools.mu
	gone  bool      // set removed it (guarded by warmPools.mu)

	// Counters, guarded by warmPools.mu.
	served, misses, made, failed int64
	lastErr                      string
	retryAt                      time.Time
	backoff                      time.Duration
}

// member is one pre-booted sandbox.
type member struct {
	// booted is the member's init, layer and run dir (id, drv, h), its
	// veth too with egress: dropMember releases them.
	*booted
	pool *warmPool
	tpl  *storage.Template
	res  api.Resources
	// limits are its user limits (the template's).
	limits api.UserLimits
	// lowers are its overlay's lower layers.
	lowers []string
	sub    network.Subnet // zero without egress
	made   time.Time
}

// start starts the filler of pools cfgs; the service's Start calls it
// after the leftovers of an earlier daemon are gone.
func (w *warmPools) start(cfgs []config.WarmPool) {
	w.mu.Lock()
	w.kick = make(chan struct{}, 1)
	w.claimed = map[string]*member{}
	w.mu.Unlock()
	w.set(cfgs)
}

// set makes cfgs the pools. A pool that stays (the same but for its
// size, config.PoolKey) keeps its ready members and counters, and drops
// the members past a smaller size; a pool that goes drops its members.
// The filler starts with the first pool.
func (w *warmPools) set(cfgs []config.WarmPool) {
	w.mu.Lock()
	if w.closed || w.kick == nil {
		w.mu.Unlock()
		return
	}
	old := map[string]*warmPool{}
	for _, p := range w.pools {
		old[config.PoolKey(p.cfg)] = p
	}
	var drop []*member
	pools := make([]*warmPool, 0, len(cfgs))
	for _, c := range cfgs {
		k := config.PoolKey(c)
		p := old[k]
		if p == nil {
			p = &warmPool{cfg: c}
		} else {
			delete(old, k)
			p.cfg = c
			if len(p.ready) > c.Size {
				drop = append(drop, p.ready[c.Size:]...)
				p.ready = p.ready[:c.Size]
			}
		}
		pools = append(pools, p)
	}
	for _, p := range old { // gone
		p.gone = true
		drop = append(drop, p.ready...)
		p.ready = nil
	}
	w.pools = pools
	start := len(pools) > 0 && !w.filling
	if start {
		w.filling = true
		w.wg.Add(1)
	}
	w.mu.Unlock()
	for _, m := range drop {
		go w.dropMember(m, "its pool was removed or shrunk")
	}
	if start {
		go w.fill()
	}
	w.wake()
}

// close destroys every ready member; the service's Close calls it.
func (w *warmPools) close() {
	w.mu.Lock()
	w.closed = true
	var all []*member
	for _, p := range w.pools {
		all = append(all, p.ready...)
		p.ready = nil
	}
	w.mu.Unlock()
	var wg sync.WaitGroup
	for _, m := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w.dropMember(m, "daemon shutting down")
		}()
	}
	wg.Wait()
}

func (w *warmPools) wake() {
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// wantNet is the pool egress that serves n: "none" or "internet".
func wantNet(n *api.Network) string {
	if hasEgress(n) {
		return api.EgressInternet
	}
	return api.EgressNone
}

// claim looks for a ready member that can serve rec (a create request
// resolved into its record, not yet stored) and, if one matches, gives
// rec the member's id and address. The returned func must run when the
// create returns: it puts an unused member back, and ends the create's
// count of those in flight (the last one wakes the filler).
func (w *warmPools) claim(rec *store.SandboxRecord, tpl *storage.Template, drv driver.Driver) (done func()) {
	// A refill's boot would take the CPU from this create's own work
	// (its record, its answer): it waits for the count to drop to zero.
	w.busy.Add(1)
	finished := func() {
		if w.busy.Add(-1) == 0 {
			w.wake()
		}
	}
	m := w.match(rec, tpl, drv)
	if m == nil {
		return finished
	}
	rec.ID = m.id
	if hasEgress(rec.Spec.Network) && m.sub.Prefix.IsValid() {
		rec.Spec.Network.Address = m.sub.String()
	}
	return func() {
		defer finished()
		w.mu.Lock()
		if w.claimed[m.id] != m { // booted (or dropped): it is the sandbox's now
			w.mu.Unlock()
			return
		}
		delete(w.claimed, m.id)
		if !w.closed && !m.pool.gone {
			m.pool.ready = append(m.pool.ready, m)
			m.pool.served--
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		w.dropMember(m, "daemon shutting down")
	}
}

// match takes the first ready, live member of a pool that matches.
func (w *warmPools) match(rec *store.SandboxRecord, tpl *storage.Template, drv driver.Driver) *member {
	if rec.Snapshot != "" || !sameLowers(rec.Lowers, tpl.LowerDirs()) {
		return nil
	}
	resize := driver.Has[driver.Resizer](drv)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed || w.claimed == nil {
		return nil
	}
	for _, p := range w.pools {
		c := p.cfg
		if c.Template != tpl.Name || c.Isolation != rec.Isolation || c.DiskMB != rec.Resources.DiskMB ||
			c.Egress != wantNet(rec.Spec.Network) {
			continue
		}
		if !resize && (c.CPU != rec.Resources.CPU || c.MemoryMB != rec.Resources.MemoryMB || c.Pids != rec.Resources.Pids) {
			continue
		}
		for len(p.ready) > 0 {
			m := p.ready[0]
			p.ready = p.ready[1:]
			if m.tpl.Version != tpl.Version || m.drv != drv || exited(m) {
				go w.dropMember(m, "stale or gone")
				continue
			}
			if rec.Spec.UserLimits != nil && *rec.Spec.UserLimits != m.limits {
				p.ready = append([]*member{m}, p.ready...) // not this create's: keep it
				break
			}
			w.claimed[m.id] = m
			p.served++
			return m
		}
		p.misses++
	}
	return nil
}

func exited(m *member) bool {
	select {
	case <-m.drv.Exited(m.h):
		return true
	default:
		return false
	}
}

// take takes the member claim gave rec's id and fits it to rec's
// limits, env and egress rules. It returns nil when rec.ID is not a
// claimed member, or when the member cannot be fitted (it is destroyed,
// and the create boots cold with the same id).
func (w *warmPools) take(ctx context.Context, rec *store.SandboxRecord) *member {
	w.mu.Lock()
	m := w.claimed[rec.ID]
	delete(w.claimed, rec.ID)
	w.mu.Unlock()
	if m == nil {
		return nil
	}
	if err := w.host.fitMember(ctx, m, rec); err != nil {
		w.log.Warn("warm pool sandbox could not take the request's settings; booting cold", "sandbox", m.id, "err", err)
		w.dropMember(m, "unfit")
		return nil
	}
	return m
}

// recordWarm writes the record of a fitted member m, once and as
// running with its handle: until that write the store does not know the
// sandbox, so a crash before it leaves leftovers that the next start
// removes, and one after it a running sandbox that the next start
// re-adopts. If the write fails m is destroyed (it ran the request's
// settings; it never goes back to the pool).
func (s *Service) recordWarm(ctx context.Context, rec *store.SandboxRecord, m *member) (*entry, error) {
	if err := s.transition(rec, api.StateRunning); err != nil {
		s.warm.dropMember(m, "refused state")
		return nil, err
	}
	rec.Handle = m.h
	if err := s.st.CreateSandbox(ctx, rec); err != nil {
		s.warm.dropMember(m, "store write failed")
		return nil, err
	}
	return s.entryOf(rec, m.drv, m.h), nil
}

// fitMember gives m rec's limits, env and egress policy.
func (s *Service) fitMember(ctx context.Context, m *member, rec *store.SandboxRecord) error {
	if len(rec.Env) > 0 {
		// The agent's default env was the template's; the request's goes
		// over it as a cold boot would have put it (driverSpec).
		if err := s.setGuestEnv(ctx, m, s.driverSpec(rec, m.tpl, "", "", "").Env); err != nil {
			return fmt.Errorf("setting the sandbox's env: %w", err)
		}
	}
	r := rec.Resources
	if r.CPU != m.res.CPU || r.MemoryMB != m.res.MemoryMB || r.Pids != m.res.Pids {
		rz, ok := driver.As[driver.Resizer](m.drv)
		if !ok {
			return fmt.Errorf("tier %s cannot change limits", m.drv.Name())
		}
		if err := rz.SetLimits(ctx, m.h, r.CPU, r.MemoryMB, r.Pids); err != nil {
			return err
		}
	}
	if n := rec.Spec.Network; hasEgress(n) {
		if s.net == nil {
			return s.checkNetAvailable(n)
		}
		pol, err := network.ParsePolicy(n.Egress, n.Allow, n.Deny)
		if err != nil {
			return err
		}
		if n.Egress != api.EgressInternet || len(n.Allow) > 0 || len(n.Deny) > 0 {
			if err := s.net.SetPolicy(m.id, pol); err != nil {
				return err
			}
		}
		if err := s.net.SetLimits(m.id, netLimits(n)); err != nil { // netlimits.go
			return err
		}
	}
	return nil
}

// dropMember destroys a member that will never be handed out.
func (w *warmPools) dropMember(m *member, why string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.Release(ctx); err != nil {
		w.log.Warn("removing a warm pool sandbox", "sandbox", m.id, "why", why, "err", err)
	}
}

// refillSettle is how long the filler waits after the last create in
// flight has returned before it boots a refill. A refill started at once
// took the CPU from the end of that create's request, which doubled a
// pool create's latency as the client sees it (2.7 ms against 1.3 ms p50
// in the bench on 2 CPUs).
const refillSettle = 10 * time.Millisecond

// fill refills the pools, one sandbox at a time, until the service
// closes.
func (w *warmPools) fill() {
	defer w.wg.Done()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.kick:
			// The create that woke us has returned, but its answer and
			// audit entry are still being written: let them go first.
			select {
			case <-w.stop:
				return
			case <-time.After(refillSettle):
			}
		case <-t.C:
			w.sweep()
		}
		for {
			if w.busy.Load() > 0 {
				break // a create is in flight; the last one to finish wakes us
			}
			p := w.nextToFill()
			if p == nil {
				break
			}
			w.fillOne(p)
			select {
			case <-w.stop:
				return
			default:
			}
		}
	}
}

// nextToFill is the emptiest pool below its size (by share filled) that
// is not backing off after an error.
func (w *warmPools) nextToFill() *warmPool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return nil
	}
	var best *warmPool
	now := time.Now()
	for _, p := range w.pools {
		if len(p.ready) >= p.cfg.Size || now.Before(p.retryAt) {
			continue
		}
		if best == nil || len(p.ready)*best.cfg.Size < len(best.ready)*p.cfg.Size {
			best = p
		}
	}
	return best
}

// fillOne boots one member of p.
func (w *warmPools) fillOne(p *warmPool) {
	m, err := w.host.bootMember(p.cfg)
	w.mu.Lock()
	if err != nil {
		p.failed++
		same := p.lastErr == err.Error()
		p.lastErr = err.Error()
		// Back off 5 s, doubling while the same error repeats, to 1 min.
		if !same || p.backoff == 0 {
			p.backoff = 5 * time.Second
		} else {
			p.backoff = min(2*p.backoff, time.Minute)
		}
		p.retryAt = time.Now().Add(p.backoff)
		wait := p.backoff
		w.mu.Unlock()
		if !same {
			w.log.Warn("warm pool: boot failed", "template", p.cfg.Template, "isolation", p.cfg.Isolation, "retry_in", wait, "err", err)
		}
		return
	}
	m.pool = p
	if w.closed || p.gone {
		w.mu.Unlock()
		w.dropMember(m, "daemon shutting down, or its pool removed")
		return
	}
	p.made++
	p.lastErr, p.backoff = "", 0
	p.ready = append(p.ready, m)
	w.mu.Unlock()
}

// bootMember boots a sandbox for a pool of config c: what Create would,
// with no record (warmHost).
func (s *Service) bootMember(c config.WarmPool) (*member, error) {
	drv, ok := s.drivers[c.Isolation]
	if !ok {
		return nil, fmt.Errorf("isolation %q is not available on this host", c.Isolation)
	}
	tpl, err := s.pool.Template(c.Template)
	if err != nil {
		return nil, err
	}
	if c.Egress == api.EgressInternet && driver.Has[driver.NetNSAtCreate](drv) {
		// Its veth would have to exist before boot, and a member has no
		// record for preparedNet to keep its address in.
		return nil, fmt.Errorf("egress internet is not available to warm pools of the %s tier, whose network is fixed when a sandbox starts (docs/network.md); use egress none", drv.Name())
	}
	if c.Egress == api.EgressInternet && s.net == nil {
		return nil, fmt.Errorf("egress internet is not available: this daemon's networking did not start")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	rec := &store.SandboxRecord{
		ID:              s.newID(),
		State:           api.StateCreating,
		Template:        tpl.Name,
		TemplateVersion: tpl.Version,
		Isolation:       c.Isolation,
		Resources:       api.Resources{CPU: c.CPU, MemoryMB: c.MemoryMB, DiskMB: c.DiskMB, Pids: c.Pids},
		Lowers:          tpl.LowerDirs(),
	}
	// The template's user limits: a create that asks for others is not
	// served from the pool (match).
	limits := api.DefaultUserLimits.Over(tpl.UserLimits)
	rec.Spec.UserLimits = &limits
	b, err := s.boot(ctx, rec, tpl, drv, false)
	if err != nil {
		return nil, err
	}
	h := b.h
	m := &member{booted: b, tpl: tpl, res: rec.Resources, limits: limits, lowers: rec.Lowers, made: time.Now()}
	if c.Code != "" {
		if err := s.startMemberKernel(ctx, m, c.Code); err != nil {
			s.warm.dropMember(m, "kernel failed")
			return nil, err
		}
	}
	if c.Desktop {
		if err := s.startMemberDesktop(ctx, m); err != nil {
			s.warm.dropMember(m, "desktop failed")
			return nil, err
		}
	}
	if c.Egress == api.EgressInternet {
		pol, _ := network.ParsePolicy(api.EgressInternet, nil, nil)
		if m.sub, err = s.net.Attach(m.id, h.Pid, pol, network.Subnet{}, network.Limits{}); err != nil {
			s.warm.dropMember(m, "network failed")
			return nil, fmt.Errorf("connecting the network: %w", err)
		}
	}
	return m, nil
}

// DropWarm destroys the ready pool sandboxes of template name (every
// version), so that the template can be removed: pool sandboxes have no
// record, so nothing else would say they use it. The pools then refill
// from whatever version exists, or report the template missing.
func (s *Service) DropWarm(name string) { s.warm.dropTemplate(name) }

// dropTemplate destroys the ready members of template name (DropWarm).
func (w *warmPools) dropTemplate(name string) {
	w.mu.Lock()
	var drop []*member
	for _, p := range w.pools {
		keep := p.ready[:0]
		for _, m := range p.ready {
			if m.tpl.Name == name {
				drop = append(drop, m)
			} else {
				keep = append(keep, m)
			}
		}
		p.ready = keep
	}
	w.mu.Unlock()
	for _, m := range drop {
		w.dropMember(m, "template removed")
	}
}

// lowers lists the layers the ready pool sandboxes are built on, for
// the garbage collection of build layers.
func (w *warmPools) lowers() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	for _, p := range w.pools {
		for _, m := range p.ready {
			out = append(out, m.lowers...)
		}
	}
	return out
}

// sweep drops ready members whose template version is no longer the
// current one (a new version was imported, or the template removed).
func (w *warmPools) sweep() {
	current := map[string]string{} // template name -> current version, "" if gone
	w.mu.Lock()
	var drop []*member
	for _, p := range w.pools {
		keep := p.ready[:0]
		for _, m := range p.ready {
			v, ok := current[m.tpl.Name]
			if !ok {
				v = w.host.templateVersion(m.tpl.Name)
				current[m.tpl.Name] = v
			}
			if v != m.tpl.Version || exited(m) {
				drop = append(drop, m)
			} else {
				keep = append(keep, m)
			}
		}
		p.ready = keep
	}
	w.mu.Unlock()
	for _, m := range drop {
		w.dropMember(m, "stale or gone")
	}
}

// Pools reports the warm pools.
func (s *Service) Pools() []api.PoolStatus { return s.warm.status() }

// SetPools makes cfgs (with defaults filled in, config.ResolvePool) the
// warm pools while the service runs: the config's [[pool]] and a
// cluster's AgentboxWarmPools (internal/kube). A pool that stays keeps
// its members.
func (s *Service) SetPools(cfgs []config.WarmPool) { s.warm.set(cfgs) }

// templateVersion is the current version of template name, "" if it is
// gone (warmHost).
func (s *Service) templateVersion(name string) string {
	if t, err := s.pool.Template(name); err == nil {
		return t.Version
	}
	return ""
}

// status reports the pools (Pools).
func (w *warmPools) status() []api.PoolStatus {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]api.PoolStatus, 0, len(w.pools))
	for _, p := range w.pools {
		c := p.cfg
		out = append(out, api.PoolStatus{
			Template:  c.Template,
			Isolation: c.Isolation,
			Size:      c.Size,
			Ready:     len(p.ready),
			Resources: api.Resources{CPU: c.CPU, MemoryMB: c.MemoryMB, DiskMB: c.DiskMB, Pids: c.Pids},
			Egress:    c.Egress,
			Code:      c.Code,
			Desktop:   c.Desktop,
			Served:    p.served,
			Misses:    p.misses,
			Booted:    p.made,
			Failures:  p.failed,
			LastError: p.lastErr,
		})
	}
	return out
}

// setGuestEnv replaces the default env of m's guest agent (proto.SetEnv,
// internal/guest/setenv.go), written on a fresh connection.
// startMemberKernel starts the kernel of lang's default code context (its
// id is the language, as for a run that names no context) in a member, so
// that the first cell of the create it serves finds it up. The agent
// passes a later SetEnv on to the waiting kernel.
func (s *Service) startMemberKernel(ctx context.Context, m *member, lang string) error {
	_, err := memberGuest(m).CreateCodeContext(ctx, api.CreateCodeContextRequest{ID: lang, Language: lang})
	if err != nil {
		return fmt.Errorf("starting the pool's %s kernel: %w", lang, err)
	}
	return nil
}

// startMemberDesktop starts a member's display at the default size; the
// create it serves finds it running (POST /desktop of the same size is a
// no-op).
func (s *Service) startMemberDesktop(ctx context.Context, m *member) error {
	d, err := memberGuest(m).StartDesktop(ctx, api.StartDesktopRequest{})
	if err == nil && d.State != api.DesktopRunning {
		err = fmt.Errorf("the display is %s: %s", d.State, d.Error)
	}
	if err != nil {
		return fmt.Errorf("starting the pool's desktop: %w", err)
	}
	return nil
}

// memberGuest is a client of a member's agent, one connection per call.
func memberGuest(m *member) *guestclient.Client {
	return guestclient.New(&http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return m.drv.DialGuest(ctx, m.h) },
		DisableKeepAlives: true,
	})
}

func (s *Service) setGuestEnv(ctx context.Context, m *member, env []string) error {
	c, err := m.drv.DialGuest(ctx, m.h)
	if err != nil {
		return err
	}
	defer c.Close()
	return guestclient.SetEnvOn(ctx, c, env)
}
