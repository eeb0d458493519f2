package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/agentbox/agentbox/api"
)

// GroupDesktop holds the desktop's lines (docs/desktop.md): a screenshot,
// a batch of one click, and a desktop sandbox from create to a running
// display, all through the daemon's API, on the desktop template.
const GroupDesktop = "desktop"

const (
	lineDesktopPNG   = "desktop/screenshot png 1024x768"
	lineDesktopJPEG  = "desktop/screenshot jpeg q80 1024x768"
	lineDesktopClick = "desktop/actions one click"
	lineDesktopReady = "desktop/create->desktop ready"
	lineDesktopPool  = "desktop/create->desktop ready (pool)"
)

// desktopTemplate is the template the desktop lines run on.
const desktopTemplate = "desktop"

// desktopLines measures the desktop on a plain display (openbox's empty
// root window, 1024x768).
func (r *runner) desktopLines(ctx context.Context) {
	if !r.wantAny(lineDesktopPNG, lineDesktopJPEG, lineDesktopClick, lineDesktopReady, lineDesktopPool) {
		return
	}
	if _, err := r.c.GetTemplate(ctx, desktopTemplate); err != nil {
		r.note("template %q is missing: the desktop lines are skipped (build it with scripts/build-template.sh desktop)", desktopTemplate)
		return
	}
	req := createReq(desktopTemplate)
	req.MemoryMB = 2048
	if r.want(lineDesktopReady) {
		n := max(r.opts.N/4, 3)
		r.add(r.sampleT(ctx, lineDesktopReady, GroupDesktop, n, false, 2*time.Minute, func(ctx context.Context) (time.Duration, error) {
			var id string
			d, err := timed(func() error {
				sb, err := r.c.CreateSandbox(ctx, req)
				if err != nil {
					return err
				}
				id = sb.ID
				st, err := r.c.Desktop(id).Start(ctx, api.StartDesktopRequest{})
				if err == nil && st.State != api.DesktopRunning {
					err = fmt.Errorf("desktop %s after start", st.State)
				}
				return err
			})
			if id != "" {
				_ = r.destroy(ctx, id)
			}
			return d, err
		}))
	}
	if r.want(lineDesktopPool) {
		r.desktopPool(ctx)
	}
	if !r.wantAny(lineDesktopPNG, lineDesktopJPEG, lineDesktopClick) {
		return
	}
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("desktop: skipped, could not create a sandbox: %v", err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	d := r.c.Desktop(sb.ID)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = d.Start(sctx, api.StartDesktopRequest{})
	cancel()
	if err != nil {
		r.note("desktop: skipped, could not start the display: %v", err)
		return
	}
	n := r.opts.N * 2
	for _, l := range []struct {
		name string
		o    api.ScreenshotOptions
	}{{lineDesktopPNG, api.ScreenshotOptions{}}, {lineDesktopJPEG, api.ScreenshotOptions{Format: api.ScreenshotJPEG, Quality: 80}}} {
		if !r.want(l.name) {
			continue
		}
		r.add(r.sample(ctx, l.name, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				s, err := d.Screenshot(ctx, l.o)
				if err == nil && (s.Width != 1024 || len(s.Data) == 0) {
					err = fmt.Errorf("a %d-byte screenshot %dx%d", len(s.Data), s.Width, s.Height)
				}
				return err
			})
		}))
	}
	if r.want(lineDesktopClick) {
		i := 0
		r.add(r.sample(ctx, lineDesktopClick, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			i++
			x, y := 100+i%500, 100+i%300
			return timed(func() error {
				_, err := d.Actions(ctx, api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionClick, X: &x, Y: &y}}})
				return err
			})
		}))
	}
}

// desktopPool times create -> a running desktop served from a pool whose
// sandboxes started their display while they waited ([[pool]] desktop =
// true; docs/config.md).
func (r *runner) desktopPool(ctx context.Context) {
	ps, err := r.c.Pools(ctx)
	if err != nil {
		r.note("%s skipped: %v", lineDesktopPool, err)
		return
	}
	i := -1
	for j, p := range ps {
		if p.Template == desktopTemplate && p.Desktop && p.Isolation == "container" && p.Egress == api.EgressNone {
			i = j
			break
		}
	}
	if i < 0 {
		r.note("%s skipped: the daemon has no pool of %s with the display started; add one to its config:"+
			" [[pool]] template = %q desktop = true memory_mb = 2048 size = 2, and restart it (docs/config.md)", lineDesktopPool, desktopTemplate, desktopTemplate)
		return
	}
	req := poolReq(desktopTemplate)
	req.MemoryMB = ps[i].Resources.MemoryMB
	n := max(r.opts.N/4, 3)
	r.add(r.sampleT(ctx, lineDesktopPool, GroupDesktop, n, false, 2*time.Minute, func(ctx context.Context) (time.Duration, error) {
		before, err := r.waitPoolFull(ctx, i)
		if err != nil {
			return 0, err
		}
		var id string
		d, err := timed(func() error {
			sb, err := r.c.CreateSandbox(ctx, req)
			if err != nil {
				return err
			}
			id = sb.ID
			st, err := r.c.Desktop(id).Start(ctx, api.StartDesktopRequest{})
			if err == nil && st.State != api.DesktopRunning {
				err = fmt.Errorf("desktop %s after start", st.State)
			}
			return err
		})
		if id != "" {
			_ = r.destroy(ctx, id)
		}
		if err == nil {
			if ps, perr := r.c.Pools(ctx); perr != nil || ps[i].Served != before+1 {
				err = fmt.Errorf("the create was not served from the pool (%v)", perr)
			}
		}
		return d, err
	}))
}
