package bench

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// GroupScale holds the cost curves: create, exec, destroy and a list
// page timed with N idle sandboxes alive (Options.Scale).
const GroupScale = "scale"

// ScalePoint is one level of the cost curves.
type ScalePoint struct {
	Live    int     `json:"live"`
	Create  Summary `json:"create"`
	Exec    Summary `json:"exec"`
	Destroy Summary `json:"destroy"`
	// ListPage is GET /v1/sandboxes?limit=100 (the first page).
	ListPage Summary `json:"list_page"`
	// FillSeconds is how long topping up to Live took, and FillErrors
	// how many of those creates failed.
	FillSeconds float64 `json:"fill_seconds"`
	FillErrors  int     `json:"fill_errors,omitempty"`
}

// scale measures the cost curves: at each level of Options.Scale
// (ascending), it tops the idle busybox sandboxes up to that many, then
// times create (+ untimed destroy), exec `true` in one of them, destroy
// (of a sandbox made untimed) and the first page of the list. A cost
// that grows with the number of live sandboxes shows as a ratio to the
// first level.
func (r *runner) scale(ctx context.Context) {
	if len(r.opts.Scale) == 0 || !r.want("scale") {
		return
	}
	levels := slices.Clone(r.opts.Scale)
	slices.Sort(levels)
	tpl := r.templates[0]
	probe, err := r.c.CreateSandbox(ctx, createReq(tpl))
	if err != nil {
		r.note("scale: skipped, could not create a sandbox: %v", err)
		return
	}
	idle := []string{probe.ID}
	defer func() { r.destroyAll(ctx, idle) }()
	n := r.opts.N
	for _, level := range levels {
		if ctx.Err() != nil {
			return
		}
		p := ScalePoint{Live: level}
		start := time.Now()
		var made []string
		made, p.FillErrors = r.fill(ctx, tpl, level+1-len(idle)) // the probe counts
		idle = append(idle, made...)
		p.FillSeconds = time.Since(start).Seconds()
		if p.FillErrors > 0 {
			r.note("scale: %d of the creates up to %d live failed", p.FillErrors, level)
		}
		if len(idle) < level+1 {
			r.note("scale: stopped at %d live, short of %d", len(idle)-1, level)
			break
		}
		at := fmt.Sprintf(" @%d", level)
		create := r.sample(ctx, "scale/create"+at, GroupScale, n, true, func(ctx context.Context) (time.Duration, error) {
			return r.createThenDestroy(ctx, createReq(tpl))
		})
		exec := r.sample(ctx, "scale/exec"+at, GroupScale, n*2, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				res, err := r.c.Exec(ctx, probe.ID, api.ExecRequest{Cmd: []string{"true"}})
				if err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("true exited %d", res.ExitCode)
				}
				return err
			})
		})
		destroy := r.sample(ctx, "scale/destroy"+at, GroupScale, n, false, func(ctx context.Context) (time.Duration, error) {
			sb, err := r.c.CreateSandbox(ctx, createReq(tpl))
			if err != nil {
				return 0, err
			}
			return timed(func() error { return r.destroy(ctx, sb.ID) })
		})
		list := r.sample(ctx, "scale/list-page"+at, GroupScale, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				_, err := r.c.ListSandboxesPage(ctx, client.ListOptions{Limit: 100})
				return err
			})
		})
		for _, res := range []Result{create, exec, destroy, list} {
			r.add(res)
		}
		p.Create, p.Exec, p.Destroy, p.ListPage = create.Summary, exec.Summary, destroy.Summary, list.Summary
		r.report.Scale = append(r.report.Scale, p)
	}
}

// fill creates count idle sandboxes of tpl, eight at a time, and
// returns their ids and how many creates failed.
func (r *runner) fill(ctx context.Context, tpl string, count int) ([]string, int) {
	var (
		mu   sync.Mutex
		ids  []string
		errs int
		wg   sync.WaitGroup
	)
	var left atomic.Int64
	left.Store(int64(count))
	for range 8 {
		wg.Go(func() {
			for left.Add(-1) >= 0 && ctx.Err() == nil {
				sb, err := r.c.CreateSandbox(ctx, createReq(tpl))
				mu.Lock()
				if err != nil {
					errs++
				} else {
					ids = append(ids, sb.ID)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return ids, errs
}

// destroyAll destroys ids, eight at a time, outliving ctx.
func (r *runner) destroyAll(ctx context.Context, ids []string) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(ids)); i = next.Add(1) - 1 {
				if err := r.destroy(ctx, ids[i]); err != nil {
					r.opts.Log.Warn("destroying a scale sandbox", "sandbox", ids[i], "err", err)
				}
			}
		})
	}
	wg.Wait()
}

// writeScale prints the cost curves: p50 and p99 of each line at each
// level, and the p50's ratio to the first level's.
func (r *Report) writeScale(w io.Writer) {
	if len(r.Scale) == 0 {
		return
	}
	fmt.Fprintf(w, "\n== cost curves (idle busybox sandboxes alive; ms, p50 / p99, and p50 against the first level)\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "live\tcreate\texec true\tdestroy\tlist page (100)\tfill s\t")
	first := r.Scale[0]
	cell := func(s, base Summary) string {
		ratio := ""
		if base.P50 > 0 {
			ratio = fmt.Sprintf(" (%.2fx)", s.P50/base.P50)
		}
		return fmt.Sprintf("%.2f / %.2f%s", s.P50, s.P99, ratio)
	}
	for _, p := range r.Scale {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%.1f\t\n", p.Live, cell(p.Create, first.Create), cell(p.Exec, first.Exec),
			cell(p.Destroy, first.Destroy), cell(p.ListPage, first.ListPage), p.FillSeconds)
	}
	tw.Flush()
}
