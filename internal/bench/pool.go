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
		served, err := r.waitPoolFull(ctx, i)
		if err != nil {
			return 0, err
		}
		var id string
		d, err := timed(func() error {
			sb, err := r.c.CreateSandbox(ctx, poolReq(t))
			if err != nil {
				return err
			}
			id = sb.ID
			if !exec {
				return nil
			}
			res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"echo", "hi"}})
			if err == nil && (res.Stdout != "hi\n" || res.ExitCode != 0) {
				err = fmt.Errorf("echo hi printed %q, exit %d", res.Stdout, res.ExitCode)
			}
			return err
		})
		if id != "" {
			_ = r.destroy(ctx, id)
		}
		if err == nil {
			if ps, perr := r.c.Pools(ctx); perr == nil && i < len(ps) && ps[i].Served <= served {
				err = errors.New("the create was not served from the pool (its limits differ from the daemon's defaults?)")
			}
		}
		return d, err
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
