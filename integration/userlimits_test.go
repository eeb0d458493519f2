package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// userLimitsProbe prints, from inside a sandbox, the rlimits that carry
// user limits, how many inotify instances one uid gets, and (where the
// kernel has them: container, microvm) the user namespace's inotify
// limits.
const userLimitsProbe = `python3 - <<'EOF'
import ctypes, os, resource as r
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while libc.inotify_init() >= 0:
    n += 1
print("msgqueue", r.getrlimit(r.RLIMIT_MSGQUEUE)[0], "sigpending", r.getrlimit(r.RLIMIT_SIGPENDING)[0], "inotify", n)
for f in ("max_inotify_instances", "max_inotify_watches"):
    try:
        print(f, open("/proc/sys/user/" + f).read().strip())
    except OSError:
        pass
EOF`

// TestUserLimits: user_limits in a create request set the per-user
// kernel counts a sandbox's processes get, per field, over the
// template's and the defaults (api.DefaultUserLimits); the API shows them
// as applied; out of range is a 400 that names the field. Verdicts read
// inside: the rlimits, the user namespace's limits, and how many
// inotify_init calls succeed (the limit itself, not a file that says it).
func TestUserLimits(t *testing.T) {
	needBase(t)
	ctx := context.Background()
	d := api.DefaultUserLimits
	tiers := append(batteryTiers(t), "microvm")
	for _, tier := range tiers {
		t.Run(tier, func(t *testing.T) {
			if tier == "microvm" {
				needMicrovm(t)
			}
			// The defaults, and a request that raises two fields.
			def := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier})
			want := api.UserLimits{InotifyInstances: 200, InotifyWatches: 524288, MsgqueueBytes: d.MsgqueueBytes, Sigpending: 8192}
			raised := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier,
				UserLimits: &api.UserLimits{InotifyInstances: 200, InotifyWatches: 524288, Sigpending: 8192}})
			for _, c := range []struct {
				id   string
				want api.UserLimits
			}{{def, d}, {raised, want}} {
				sb, err := env.client.GetSandbox(ctx, c.id)
				if err != nil {
					t.Fatal(err)
				}
				if sb.UserLimits == nil || *sb.UserLimits != c.want {
					t.Errorf("GET shows user_limits %+v, want %+v", sb.UserLimits, c.want)
				}
				out := mustSh(t, c.id, userLimitsProbe)
				line := fmt.Sprintf("msgqueue %d sigpending %d", c.want.MsgqueueBytes, c.want.Sigpending)
				if !strings.Contains(out, line) {
					t.Errorf("rlimits inside: %q, want %q", out, line)
				}
				// gVisor's kernel keeps its own inotify counts (docs/SECURITY.md).
				if tier == "gvisor" {
					continue
				}
				// The agent's own process may hold a few instances of the
				// uid's count (its file watches): at most 4 short.
				var n int64
				if _, err := fmt.Sscanf(out[strings.Index(out, "inotify "):], "inotify %d", &n); err != nil ||
					n > c.want.InotifyInstances || n < c.want.InotifyInstances-4 {
					t.Errorf("inotify_init succeeded %d times, want %d: %q", n, c.want.InotifyInstances, out)
				}
				for _, l := range []string{
					fmt.Sprintf("max_inotify_instances %d", c.want.InotifyInstances),
					fmt.Sprintf("max_inotify_watches %d", c.want.InotifyWatches),
				} {
					if !strings.Contains(out, l) {
						t.Errorf("inside: %q, want %q", out, l)
					}
				}
			}
		})
	}

	// Out of range: a 400 naming the field and the range, nothing made.
	_, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox",
		UserLimits: &api.UserLimits{InotifyWatches: 1 << 30}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "user_limits.inotify_watches must be between 1 and 1048576") {
		t.Errorf("inotify_watches 2^30: %v, want invalid_argument naming the field", err)
	}
	_, errOut, code := cli(t, "", "create", "--template", "busybox", "--user-limit", "inotify=5")
	if code == 0 || !strings.Contains(errOut, "unknown user limit \"inotify\"") {
		t.Errorf("--user-limit inotify=5: exit %d, %q", code, errOut)
	}
}

// TestTemplateUserLimits: a build spec's user_limits step sets the
// template's defaults (GET /v1/templates shows them), its sandboxes get
// them, a create's user_limits override them field by field, and a
// template built on it keeps them.
func TestTemplateUserLimits(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	name := "ul-" + randHex(4)
	spec := "from: busybox\nsteps:\n  - user_limits: {inotify_watches: 262144, sigpending: 1024}\n"
	tpl, err := env.client.BuildTemplate(ctx, name, []byte(spec), nil, nil)
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), name) })
	if tpl.UserLimits == nil || tpl.UserLimits.InotifyWatches != 262144 || tpl.UserLimits.Sigpending != 1024 {
		t.Errorf("template shows user_limits %+v", tpl.UserLimits)
	}
	d := api.DefaultUserLimits
	for _, c := range []struct {
		req  *api.UserLimits
		want api.UserLimits
	}{
		{nil, api.UserLimits{InotifyInstances: d.InotifyInstances, InotifyWatches: 262144, MsgqueueBytes: d.MsgqueueBytes, Sigpending: 1024}},
		{&api.UserLimits{Sigpending: 2048}, api.UserLimits{InotifyInstances: d.InotifyInstances, InotifyWatches: 262144, MsgqueueBytes: d.MsgqueueBytes, Sigpending: 2048}},
	} {
		sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: name, UserLimits: c.req})
		if err != nil {
			t.Fatalf("create: %v", err)
		}
		if sb.UserLimits == nil || *sb.UserLimits != c.want {
			t.Errorf("request %+v: user_limits %+v, want %+v", c.req, sb.UserLimits, c.want)
		}
		if got := mustSh(t, sb.ID, "cat /proc/sys/user/max_inotify_watches"); got != "262144" {
			t.Errorf("max_inotify_watches inside %q, want 262144", got)
		}
		_ = env.client.DestroySandbox(ctx, sb.ID)
	}
	// A build on it keeps them, as it keeps the env.
	child := name + "-2"
	tpl2, err := env.client.BuildTemplate(ctx, child, []byte("from: "+name+"\nsteps:\n  - env: {A: b}\n"), nil, nil)
	if err != nil {
		t.Fatalf("build on %s: %v", name, err)
	}
	t.Cleanup(func() { _ = env.client.RemoveTemplate(context.Background(), child) })
	if tpl2.UserLimits == nil || tpl2.UserLimits.InotifyWatches != 262144 {
		t.Errorf("%s (from %s) shows user_limits %+v", child, name, tpl2.UserLimits)
	}
}
