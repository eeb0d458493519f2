package bench

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/agentbox/agentbox/api"
)

// The desktop baselines: what an agent pays when it scripts the desktop
// through exec, as E2B Desktop and Anthropic's computer-use reference
// container do (a process per action or screenshot). Each sample is one
// exec round trip in a sandbox of the desktop template, on its own Xvfb
// (1024x768, a plain root window): `xdotool mousemove X Y click 1`, and
// `scrot` to a file that is then read back through the files API (an
// agent needs the bytes, not the file).
const (
	desktopBaselineClick = "desktop/baseline xdotool click"
	desktopBaselineShot  = "desktop/baseline scrot + read"
)

// desktopEnv is the environment of the baselines' X clients.
var desktopEnv = map[string]string{"DISPLAY": ":9", "XAUTHORITY": "/tmp/bench-xauth"}

func (r *runner) desktopBaselines(ctx context.Context) {
	if !r.wantAny(desktopBaselineClick, desktopBaselineShot) {
		return
	}
	ts, err := r.c.ListTemplates(ctx)
	if err != nil {
		r.note("desktop baselines: skipped, listing templates: %v", err)
		return
	}
	found := false
	for _, t := range ts {
		found = found || t.Name == "desktop"
	}
	if !found {
		r.note("desktop baselines: skipped, the desktop template is missing (build it with scripts/build-template.sh desktop)")
		return
	}
	req := createReq("desktop")
	req.DiskMB = 0
	req.MemoryMB = 2048
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("desktop baselines: skipped, could not create a desktop sandbox: %v", err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	id := sb.ID
	if err := r.startBenchDisplay(ctx, id); err != nil {
		r.note("desktop baselines: skipped, %v", err)
		return
	}
	n := r.opts.N
	if r.want(desktopBaselineClick) {
		i := 0
		res := r.sample(ctx, desktopBaselineClick, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			// A different point each time: xdotool's moves to where the
			// pointer already is are the case its --sync hangs on.
			i++
			x, y := 100+(i%2)*200, 100+(i%3)*100
			return timed(func() error {
				return benchExec(ctx, r, id, fmt.Sprintf("xdotool mousemove %d %d click 1", x, y))
			})
		})
		res.Note = "exec of xdotool per action, as E2B Desktop does"
		r.add(res)
	}
	if r.want(desktopBaselineShot) {
		res := r.sample(ctx, desktopBaselineShot, GroupDesktop, n, true, func(ctx context.Context) (time.Duration, error) {
			return timed(func() error {
				if err := benchExec(ctx, r, id, "scrot -o /tmp/bench-shot.png"); err != nil {
					return err
				}
				rc, err := r.c.ReadFile(ctx, id, "/tmp/bench-shot.png")
				if err != nil {
					return err
				}
				defer rc.Close()
				nb, err := io.Copy(io.Discard, rc)
				if err == nil && nb < 100 {
					err = fmt.Errorf("scrot's PNG has %d bytes", nb)
				}
				return err
			})
		})
		res.Note = "exec of scrot, then the PNG read back, as E2B Desktop does"
		r.add(res)
	}
}

// startBenchDisplay starts Xvfb :9 (with a cookie) in sandbox id as a
// background process and waits until it answers.
func (r *runner) startBenchDisplay(ctx context.Context, id string) error {
	if err := benchExec(ctx, r, id, `xauth -f /tmp/bench-xauth add :9 . "$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"`); err != nil {
		return fmt.Errorf("making the X cookie: %w", err)
	}
	if _, err := r.c.StartProcess(ctx, id, api.StartProcessRequest{Tag: "bench-x",
		Cmd: []string{"Xvfb", ":9", "-screen", "0", "1024x768x24", "-nolisten", "tcp", "-auth", "/tmp/bench-xauth"}}); err != nil {
		return fmt.Errorf("starting Xvfb: %w", err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		err := benchExec(ctx, r, id, "xdpyinfo >/dev/null")
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("Xvfb did not answer within a minute: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// benchExec runs a shell command with the baselines' display and fails
// unless it exits 0.
func benchExec(ctx context.Context, r *runner, id, script string) error {
	res, err := r.c.Exec(ctx, id, api.ExecRequest{Shell: script, Env: desktopEnv})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("%q exited %d: %s", script, res.ExitCode, res.Stderr)
	}
	return nil
}
