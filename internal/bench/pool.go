package bench

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
)

// execShell is an exec request running script with sh -c.
func execShell(script string) api.ExecRequest { return api.ExecRequest{Shell: script} }

// poolReq is the create request of the warm pool lines: like createReq
// but with the daemon's default disk size, which a pool of the default
// limits serves (createReq's keeps the cold lines cold).
func poolReq(template string) api.CreateSandboxRequest {
	req := createReq(template)
	req.DiskMB = 0
	return req
}

// findPool returns the index of the daemon's pool that serves poolReq(t):
// the template on the container tier, egress none, the daemon's default
// limits (the bench cannot know them, so it takes a pool whose served
// count rises on a probe create).
func (r *runner) findPool(ctx context.Context, t string) (int, error) {
	ps, err := r.c.Pools(ctx)
	if err != nil {
		return -1, err
	}
	for i, p := range ps {
		if p.Template == t && p.Isolation == "container" && p.Egress == api.EgressNone {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the daemon has no warm pool of %s (container, egress none); add one to its config:"+
		" [[pool]] template = %q size = 8, and restart it (docs/PERFORMANCE.md)", t, t)
}

// waitPoolFull waits until pool i has its size ready and returns its
// served count.
func (r *runner) waitPoolFull(ctx context.Context, i int) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		ps, err := r.c.Pools(ctx)
		if err != nil {
			return 0, err
		}
		if i >= len(ps) {
			return 0, errors.New("the daemon's pools changed during the run")
		}
		if ps[i].Ready >= ps[i].Size {
			return ps[i].Served, nil
		}
		if p := ps[i]; p.LastError != "" && p.Ready == 0 {
			return 0, fmt.Errorf("the pool cannot boot sandboxes: %s", p.LastError)
		}
		select {
		case <-ctx.Done():
			return 0, fmt.Errorf("waiting for the pool to refill: %w", ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// pool measures create, and create to first output, served from a warm
// pool: each sample waits for the pool to be full (refills are not
// timed), creates, checks the pool served it, and destroys untimed.
func (r *runner) pool(ctx context.Context) {
	t := r.templates[0]
	cname, oname := "create/"+t+" (pool)", "create-to-first-output (pool)"
	if !r.wantAny(cname, oname) {
		return
	}
	i, err := r.findPool(ctx, t)
	if err != nil {
		r.note("%s: skipped: %v", cname, err)
		return
	}
	one := func(ctx context.Context, exec bool) (time.Duration, error) {
		return r.servedFrom(ctx, i, func() (time.Duration, error) {
			return r.createThen(ctx, poolReq(t), func(ctx context.Context, id string) error {
				if !exec {
					return nil
				}
				res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"echo", "hi"}})
				if err == nil && (res.Stdout != "hi\n" || res.ExitCode != 0) {
					err = fmt.Errorf("echo hi printed %q, exit %d", res.Stdout, res.ExitCode)
				}
				return err
			})
		})
	}
	if r.want(cname) {
		res := r.sample(ctx, cname, GroupLifecycle, r.opts.N, true, func(ctx context.Context) (time.Duration, error) { return one(ctx, false) })
		res.Floor = "baseline/fork-exec"
		res.Note = "a sandbox booted ahead of time is handed out; refills are not timed"
		r.add(res)
	}
	if r.want(oname) {
		res := r.sample(ctx, oname, GroupLifecycle, r.opts.N, true, func(ctx context.Context) (time.Duration, error) { return one(ctx, true) })
		res.Floor = "baseline/fork-exec"
		r.add(res)
	}
}

// poolWhere returns the index of the daemon's first container-tier pool
// with egress none that match accepts (-1 if none), and the pools.
func (r *runner) poolWhere(ctx context.Context, match func(api.PoolStatus) bool) (int, []api.PoolStatus, error) {
	ps, err := r.c.Pools(ctx)
	if err != nil {
		return -1, nil, err
	}
	for i, p := range ps {
		if p.Isolation == "container" && p.Egress == api.EgressNone && match(p) {
			return i, ps, nil
		}
	}
	return -1, ps, nil
}

// servedFrom runs one sample of pool i's line: it waits (untimed) for
// the pool to be full, runs measure, and fails the sample unless the
// pool served exactly one create meanwhile.
func (r *runner) servedFrom(ctx context.Context, i int, measure func() (time.Duration, error)) (time.Duration, error) {
	before, err := r.waitPoolFull(ctx, i)
	if err != nil {
		return 0, err
	}
	d, err := measure()
	if err != nil {
		return d, err
	}
	if ps, err := r.c.Pools(ctx); err != nil || ps[i].Served != before+1 {
		return d, fmt.Errorf("the create was not served from the pool (its limits differ from the pool's?) %v", err)
	}
	return d, nil
}

// createThen times a create of req followed by then (when not nil) on
// the new sandbox, and destroys the sandbox untimed.
func (r *runner) createThen(ctx context.Context, req api.CreateSandboxRequest, then func(ctx context.Context, id string) error) (time.Duration, error) {
	var id string
	d, err := timed(func() error {
		sb, err := r.c.CreateSandbox(ctx, req)
		if err != nil {
			return err
		}
		id = sb.ID
		if then == nil {
			return nil
		}
		return then(ctx, id)
	})
	if id != "" {
		_ = r.destroy(ctx, id)
	}
	return d, err
}
