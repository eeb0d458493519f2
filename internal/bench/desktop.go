package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
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
	lineDesktopBusy  = "desktop/screenshot png 1024x768 (busy page)"
)

// busyPage fills the screen with what compresses worst short of pure
// noise: a gradient under a canvas of coloured noise, in a Chromium kiosk
// window, titled busy when drawn.
const busyPage = `<!doctype html><html><head><title>loading</title><style>
html,body{margin:0;height:100%;background:linear-gradient(90deg,#036,#fc0)}
canvas{position:absolute;left:0;top:0}</style></head><body><canvas id=c></canvas>
<script>var c=document.getElementById('c');c.width=innerWidth;c.height=innerHeight/2;
var x=c.getContext('2d'),d=x.createImageData(c.width,c.height),s=1;
for(var i=0;i<d.data.length;i++){s=(s*1103515245+12345)&0x7fffffff;d.data[i]=i%4==3?255:s>>16&255}
x.putImageData(d,0,0);document.title='busy'</script></body></html>`

// desktopTemplate is the template the desktop lines run on.
const desktopTemplate = "desktop"

// desktopLines measures the desktop on a plain display (openbox's empty
// root window, 1024x768).
func (r *runner) desktopLines(ctx context.Context) {
	if !r.wantAny(lineDesktopPNG, lineDesktopJPEG, lineDesktopClick, lineDesktopReady, lineDesktopPool, lineDesktopBusy,
		lineDesktopPNG+desktopTierSuffix, lineDesktopClick+desktopTierSuffix, lineDesktopBusy+desktopTierSuffix) {
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
			return r.createThen(ctx, req, r.startDesktop)
		}))
	}
	if r.want(lineDesktopPool) {
		r.desktopPool(ctx)
	}
	r.desktopShots(ctx, req, "")
	// The gvisor tier's own lines: the screenshot, the busy page and the
	// click, under the same budgets (the JPEG and the start are the
	// container tier's only).
	if h, err := r.c.Health(ctx); err == nil && slices.Contains(h.Drivers, gvisorTier) {
		req.Isolation = gvisorTier
		r.desktopShots(ctx, req, desktopTierSuffix)
	}
}

// gvisorTier is the tier whose desktop lines are measured beside the
// container tier's, named with desktopTierSuffix.
const (
	gvisorTier        = "gvisor"
	desktopTierSuffix = " (gvisor)"
)

// desktopShots measures the screenshot, click and busy-page lines in one
// desktop sandbox of req; suffix names the tier ("" for the container
// tier, whose lines carry no suffix and alone get the JPEG line).
func (r *runner) desktopShots(ctx context.Context, req api.CreateSandboxRequest, suffix string) {
	linePNG, lineJPEG, lineClick, lineBusy := lineDesktopPNG+suffix, lineDesktopJPEG, lineDesktopClick+suffix, lineDesktopBusy+suffix
	if suffix != "" {
		lineJPEG = "" // the container tier's only
	}
	if !r.wantAny(linePNG, lineJPEG, lineClick, lineBusy) {
		return
	}
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("desktop%s: skipped, could not create a sandbox: %v", suffix, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	d := r.c.Desktop(sb.ID)
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	_, err = d.Start(sctx, api.StartDesktopRequest{})
	cancel()
	if err != nil {
		r.note("desktop%s: skipped, could not start the display: %v", suffix, err)
		return
	}
	// The display's programs start busy (more so under gVisor): the
	// lines time a desktop on show, as an agent's steps meet it.
	if err := r.waitSettled(ctx, sb.ID, time.Now()); err != nil {
		r.note("desktop%s: %v; measured anyway", suffix, err)
	}
	n := r.opts.N * 2
	for _, l := range []struct {
		name string
		o    api.ScreenshotOptions
	}{{linePNG, api.ScreenshotOptions{}}, {lineJPEG, api.ScreenshotOptions{Format: api.ScreenshotJPEG, Quality: 80}}} {
		if l.name == "" || !r.want(l.name) {
			continue
		}
		res := r.sample(ctx, l.name, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				s, err := d.Screenshot(ctx, l.o)
				if err == nil && (s.Width != 1024 || len(s.Data) == 0) {
					err = fmt.Errorf("a %d-byte screenshot %dx%d", len(s.Data), s.Width, s.Height)
				}
				return err
			})
		})
		res.Floor = desktopBaselineShot
		r.add(res)
	}
	if r.want(lineClick) {
		i := 0
		res := r.sample(ctx, lineClick, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			i++
			x, y := 100+i%500, 100+i%300
			return timed(func() error {
				_, err := d.Actions(ctx, api.DesktopActionsRequest{Actions: []api.DesktopAction{{Type: api.ActionClick, X: &x, Y: &y}}})
				return err
			})
		})
		res.Floor = desktopBaselineClick
		r.add(res)
	}
	if r.want(lineBusy) {
		if err := r.openBusyPage(ctx, sb.ID, lineBusy); err != nil {
			r.note("%s skipped: %v", lineBusy, err)
			return
		}
		res := r.sample(ctx, lineBusy, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				_, err := d.Screenshot(ctx, api.ScreenshotOptions{})
				return err
			})
		})
		res.Floor = desktopBaselineShot
		r.add(res)
	}
}

// openBusyPage opens busyPage in Chromium on sandbox id's display and
// waits until its window is titled busy and the sandbox has settled; a
// note names line when it does not settle.
func (r *runner) openBusyPage(ctx context.Context, id, line string) error {
	if _, err := r.c.WriteFile(ctx, id, "/tmp/agentbox-bench/busy.html", strings.NewReader(busyPage), 0o644); err != nil {
		return err
	}
	d := r.c.Desktop(id)
	if _, err := d.Open(ctx, "file:///tmp/agentbox-bench/busy.html"); err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		ws, err := d.Windows(ctx)
		if err != nil {
			return err
		}
		drawn := false
		for _, w := range ws {
			drawn = drawn || strings.HasPrefix(w.Title, "busy")
		}
		if drawn {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no Chromium window titled busy after a minute (windows: %+v)", ws)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := r.waitSettled(ctx, id, time.Now()); err != nil {
		r.note("%s: %v; measured anyway", line, err)
	}
	return nil
}

// settledCPU is the sandbox's CPU use, in percent of a core, under which
// Chromium counts as done with its start and the page's first paint.
const settledCPU = 25

// waitSettled waits, at most a minute, for a usage sample of sandbox id
// taken wholly after since that shows it below settledCPU. Chromium
// keeps a core busy for a few seconds after its window shows the page
// (its first start: profile, caches, raster), and so do a new display's
// programs; the lines time screenshots and clicks of a desktop on show,
// as an agent meets it step after step, not racing those starts for the
// sandbox's CPU.
func (r *runner) waitSettled(ctx context.Context, id string, since time.Time) error {
	deadline := time.Now().Add(time.Minute)
	var last api.UsageSample
	for {
		m, err := r.c.SandboxMetrics(ctx, id)
		if err != nil {
			return err
		}
		window := time.Duration(m.IntervalSeconds * float64(time.Second))
		for _, s := range m.Samples {
			if s.Time.Add(-window).After(since) {
				last = s
				if s.CPUPercent < settledCPU {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox still used %.0f%% of a core a minute after Chromium showed the page", last.CPUPercent)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// desktopPool times create -> a running desktop served from a pool whose
// sandboxes started their display while they waited ([[pool]] desktop =
// true; docs/config.md).
func (r *runner) desktopPool(ctx context.Context) {
	i, ps, err := r.poolWhere(ctx, func(p api.PoolStatus) bool { return p.Template == desktopTemplate && p.Desktop })
	if err != nil {
		r.note("%s skipped: %v", lineDesktopPool, err)
		return
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
		return r.servedFrom(ctx, i, func() (time.Duration, error) { return r.createThen(ctx, req, r.startDesktop) })
	}))
}

// startDesktop starts sandbox id's display, failing unless it runs.
func (r *runner) startDesktop(ctx context.Context, id string) error {
	st, err := r.c.Desktop(id).Start(ctx, api.StartDesktopRequest{})
	if err == nil && st.State != api.DesktopRunning {
		err = fmt.Errorf("desktop %s after start", st.State)
	}
	return err
}
