package integration

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/internal/bench"
)

// The desktop lines of `agentbox bench` run against the test daemon (a
// few samples each): the API's screenshot, click and start, on the
// container and the gvisor tier, and the xdotool and scrot baselines
// next to them, every sample without error.
func TestDesktopBenchLines(t *testing.T) {
	importDesktop(t)
	benchLines(t, `^desktop/`, 5, 8*time.Minute, []string{"desktop/baseline xdotool click", "desktop/baseline scrot + read",
		"desktop/screenshot png 1024x768", "desktop/screenshot jpeg q80 1024x768", "desktop/actions one click",
		"desktop/create->desktop ready", "desktop/screenshot png 1024x768 (busy page)",
		"desktop/screenshot png 1024x768 (gvisor)", "desktop/actions one click (gvisor)",
		"desktop/screenshot png 1024x768 (busy page) (gvisor)"})
}

// benchLines runs the lines of `agentbox bench` that only matches
// against the test daemon, n samples each, within limit, and checks that
// every line of want is there with samples and no error. It returns the
// report (its notes say what was skipped and why).
func benchLines(t *testing.T, only string, n int, limit time.Duration, want []string) *bench.Report {
	t.Helper()
	return benchLinesWith(t, bench.Options{}, only, n, limit, want)
}

// benchLinesWith is benchLines with more options (Clients, Templates).
func benchLinesWith(t *testing.T, o bench.Options, only string, n int, limit time.Duration, want []string) *bench.Report {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	var progress strings.Builder
	o.Client, o.Quick, o.N, o.Only, o.Progress, o.Log = env.client, true, n, regexp.MustCompile(only), &progress, testLogger()
	if len(o.Templates) == 0 {
		o.Templates = []string{"busybox"}
	}
	rep, err := bench.Run(ctx, o)
	if err != nil {
		t.Fatalf("bench: %v\n%s", err, progress.String())
	}
	t.Logf("bench:\n%s", progress.String())
	got := map[string]bench.Result{}
	for _, r := range rep.Results {
		got[r.Name] = r
	}
	for _, name := range want {
		r, ok := got[name]
		if !ok {
			t.Errorf("no line %q; notes: %q", name, rep.Notes)
			continue
		}
		if r.N == 0 || r.Errors != 0 || r.P50 <= 0 {
			t.Errorf("%s: n=%d errors=%d p50=%.2f ms", name, r.N, r.Errors, r.P50)
		}
	}
	return rep
}
