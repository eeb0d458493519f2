package bench

import (
	"context"
	"fmt"
	"time"
)

// GroupState holds pause, resume, snapshot, fork and reset.
const GroupState = "state"

// state measures pause and resume, snapshot, fork with 1 and 10 children
// and reset, each on a sandbox of the first template that has a file
// written (so snapshot and fork have a layer to capture).
func (r *runner) state(ctx context.Context) {
	names := []string{"pause", "resume", "snapshot", "fork/1", "fork/10", "reset", "reset (back-to-back)"}
	if !r.wantAny(names...) {
		return
	}
	r.withSandbox(ctx, "state", func(id string) {
		if _, err := r.c.Exec(ctx, id, execShell("echo bench > /tmp/state")); err != nil {
			r.note("state: skipped, exec failed: %v", err)
			return
		}
		if r.wantAny("pause", "resume") {
			var resumes []time.Duration
			resumeErrs := 0
			res := r.sample(ctx, "pause", GroupState, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
				d, err := timed(func() error { _, err := r.c.PauseSandbox(ctx, id); return err })
				rd, rerr := timed(func() error { _, err := r.c.ResumeSandbox(ctx, id); return err })
				if rerr != nil {
					resumeErrs++
				} else {
					resumes = append(resumes, rd)
				}
				return d, err
			})
			if r.want("pause") {
				r.add(res)
			}
			if r.want("resume") {
				r.add(Result{Name: "resume", Group: GroupState, Summary: Summarize(resumes), Errors: resumeErrs})
			}
		}
		if r.want("snapshot") {
			res := r.sample(ctx, "snapshot", GroupState, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
				var snapID string
				d, err := timed(func() error {
					s, err := r.c.CreateSnapshot(ctx, id, "")
					if s != nil {
						snapID = s.ID
					}
					return err
				})
				if snapID != "" {
					_ = r.c.DeleteSnapshot(context.WithoutCancel(ctx), snapID)
				}
				return d, err
			})
			res.Note = "freeze, btrfs snapshot of the writable layer, thaw"
			r.add(res)
		}
		for _, k := range []int{1, 10} {
			name := fmt.Sprintf("fork/%d", k)
			if !r.want(name) {
				continue
			}
			n := r.opts.N
			if k > 1 {
				n = max(r.opts.N/10, 2)
			}
			res := r.sample(ctx, name, GroupState, n, k == 1, func(ctx context.Context) (time.Duration, error) {
				var ids []string
				d, err := timed(func() error {
					kids, err := r.c.ForkSandbox(ctx, id, k)
					for _, kid := range kids {
						ids = append(ids, kid.ID)
					}
					if err == nil && len(kids) != k {
						err = fmt.Errorf("fork returned %d children, want %d", len(kids), k)
					}
					return err
				})
				for _, kid := range ids {
					_ = r.destroy(ctx, kid)
				}
				return d, err
			})
			res.Note = fmt.Sprintf("one request for %d children, until all run", k)
			if k > 1 && res.N > 0 {
				res.Rate, res.RateUnit = res.P50/float64(k), "ms/child (p50)"
			}
			r.add(res)
		}
		// Reset switches to a standby init booted after the previous
		// reset; "reset" gives it time to boot (200 ms, untimed), as a
		// sandbox used between resets does; back-to-back resets wait
		// for it.
		if r.want("reset") {
			res := r.sample(ctx, "reset", GroupState, r.opts.N, true, func(ctx context.Context) (time.Duration, error) {
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(200 * time.Millisecond):
				}
				return timed(func() error { _, err := r.c.ResetSandbox(ctx, id, ""); return err })
			})
			res.Note = "back to the template, same id; 200 ms after the previous one"
			r.add(res)
		}
		if name := "reset (back-to-back)"; r.want(name) {
			res := r.sample(ctx, name, GroupState, max(r.opts.N/5, 2), false, func(ctx context.Context) (time.Duration, error) {
				return timed(func() error { _, err := r.c.ResetSandbox(ctx, id, ""); return err })
			})
			r.add(res)
		}
	})
}
