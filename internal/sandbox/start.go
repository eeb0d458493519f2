package sandbox

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/storage"
	"github.com/agentbox/agentbox/internal/tracing"
)

// StartTag is the tag of the background process a template's start
// command runs as (GET /v1/sandboxes/{id}/processes/start).
const StartTag = "start"

// startTemplate starts tpl's start command as a background process of e
// (through the guest's processes API, so it is listed, logged and killed
// like any other) and waits for tpl's readiness check: the check command
// exits 0, or the port accepts a connection inside the sandbox. It fails
// when the timeout passes or the start command exits first; the caller
// removes the sandbox.
func (s *Service) startTemplate(ctx context.Context, e *entry, tpl *storage.Template) (err error) {
	if tpl.Start == "" && tpl.Ready == nil {
		return nil
	}
	ctx, sp := tracing.Start(ctx, "sandbox.StartTemplate")
	defer func() { tracing.End(sp, err) }()
	timeout := 30 * time.Second
	if tpl.Ready != nil && tpl.Ready.TimeoutMs > 0 {
		timeout = time.Duration(tpl.Ready.TimeoutMs) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout+5*time.Second)
	defer cancel()
	t0 := time.Now()
	started := false
	if tpl.Start != "" {
		if _, err := guestclient.New(e.guest).StartProcess(ctx, api.StartProcessRequest{Shell: tpl.Start, Tag: StartTag}); err != nil {
			return fmt.Errorf("template %s: starting its start command: %w", tpl.Name, err)
		}
		started = true
	}
	if tpl.Ready == nil {
		return nil
	}
	what := fmt.Sprintf("port %d", tpl.Ready.Port)
	if tpl.Ready.Cmd != "" {
		what = fmt.Sprintf("command %q", tpl.Ready.Cmd)
	}
	deadline := t0.Add(timeout)
	wait := 10 * time.Millisecond
	var last string
	for {
		ok, detail := s.readyOnce(ctx, e, tpl.Ready)
		if ok {
			s.log.Debug("template ready", "sandbox", e.id, "template", tpl.Name, "took", time.Since(t0))
			return nil
		}
		last = detail
		if started {
			if p, out := processState(ctx, guestclient.New(e.guest), StartTag); p != nil && p.State == api.ProcessExited {
				code := -1
				if p.ExitCode != nil {
					code = *p.ExitCode
				}
				return errdefs.Precondition("template %s: its start command %q exited (code %d) before the sandbox was ready (%s); its output:\n%s", tpl.Name, tpl.Start, code, what, out)
			}
		}
		if time.Now().After(deadline) {
			msg := fmt.Sprintf("template %s: the sandbox was not ready within %v (%s; last: %s)", tpl.Name, timeout, what, last)
			if started {
				_, out := processState(ctx, guestclient.New(e.guest), StartTag)
				msg += "; the start command's output:\n" + out
			}
			return errdefs.Unavailable("%s", msg)
		}
		time.Sleep(wait)
		if wait < 200*time.Millisecond {
			wait *= 2
		}
	}
}

// readyOnce runs the readiness check once.
func (s *Service) readyOnce(ctx context.Context, e *entry, r *api.ReadyCheck) (bool, string) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if r.Cmd != "" {
		var out strings.Builder
		code, err := guestclient.New(e.guest).RunProcess(cctx, api.StartProcessRequest{Shell: r.Cmd, TimeoutMs: 5000}, func(_ string, b []byte) {
			if out.Len() < 4096 {
				out.Write(b)
			}
		})
		if err != nil {
			return false, err.Error()
		}
		return code == 0, fmt.Sprintf("exit code %d: %s", code, strings.TrimSpace(out.String()))
	}
	c, err := s.DialPort(cctx, e.id, r.Port)
	if err != nil {
		return false, err.Error()
	}
	c.Close()
	return true, ""
}

// processState returns the guest's view of background process ref and
// the tail of its output.
func processState(ctx context.Context, c *guestclient.Client, ref string) (*api.Process, string) {
	p, err := c.Process(ctx, ref)
	if err != nil {
		return nil, ""
	}
	o, err := c.ProcessOutput(ctx, ref)
	if err != nil {
		return p, ""
	}
	out := string(o.Stdout) + string(o.Stderr)
	if len(out) > 2048 {
		out = "..." + out[len(out)-2048:]
	}
	return p, out
}
