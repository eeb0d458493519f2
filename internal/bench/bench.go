package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// Options configures a run. Zero values mean the defaults below.
type Options struct {
	// Client talks to the daemon under test.
	Client *client.Client
	// FreshClient, when set, opens a new connection per request (see
	// FreshConnClient); the stream lines use it as the CLI would, and
	// also run on Client to show what connection reuse does.
	FreshClient *client.Client
	// Quick runs every measurement with few samples and short load
	// phases: a smoke test for CI (about a minute in all).
	Quick bool
	// N is the number of samples per latency line (default 50, quick 5).
	N int
	// Only, when set, runs only the measurements whose name matches
	// (names as printed, e.g. "create/busybox", "baseline/runc",
	// "density", "throughput/execs").
	Only *regexp.Regexp
	// Density is how many idle sandboxes the density line holds at once
	// (default 200, quick 5).
	Density int
	// Scale are the levels of the cost curves: create, exec, destroy and
	// a list page timed with that many idle sandboxes alive (scale.go);
	// none: no curves.
	Scale []int
	// Concurrency is the number of clients in the throughput lines
	// (default 16).
	Concurrency int
	// LoadDuration is how long each throughput line runs (default 10 s,
	// quick 2 s).
	LoadDuration time.Duration
	// Templates are the templates create is measured on (default
	// busybox and base); the first also serves the other lines.
	Templates []string
	// CgroupParent is the daemon's cgroup_parent (default "agentbox").
	CgroupParent string
	// DaemonPID is the daemon's pid, for its RSS; 0 reads
	// /run/agentbox/agentbox.pid, else looks for one `agentbox serve`.
	DaemonPID int
	// RuncRootfs is the root filesystem of the runc baseline's bundle
	// (default /var/lib/agentbox/build/busybox).
	RuncRootfs string
	// E2B says where the e2b lines find their scripts and the daemon
	// (e2b.go).
	E2B E2BOptions
	// Clients says where the clients lines find the CLI and the Python
	// SDK (clients.go).
	Clients ClientOptions
	// Fleet says how the fleet lines reach the daemon as a fleet node
	// (fleet.go).
	Fleet FleetOptions
	// Progress, when set, receives one line per finished measurement.
	Progress io.Writer
	// Log receives details of failures.
	Log *slog.Logger
}

func (o *Options) setDefaults() {
	if o.N <= 0 {
		o.N = 50
		if o.Quick {
			o.N = 5
		}
	}
	if o.Density <= 0 {
		o.Density = 200
		if o.Quick {
			o.Density = 5
		}
	}
	if o.Concurrency <= 0 {
		o.Concurrency = 16
	}
	if o.LoadDuration <= 0 {
		o.LoadDuration = 10 * time.Second
		if o.Quick {
			o.LoadDuration = 2 * time.Second
		}
	}
	if len(o.Templates) == 0 {
		o.Templates = []string{"busybox", "base"}
	}
	if o.CgroupParent == "" {
		o.CgroupParent = "agentbox"
	}
	if o.RuncRootfs == "" {
		o.RuncRootfs = "/var/lib/agentbox/build/busybox"
	}
	if o.Log == nil {
		o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// coldDiskMB is the disk size of the cold lines' sandboxes, which no pool
// of the default size serves.
const coldDiskMB = 1000

// benchMeta marks every sandbox the harness makes, so that a run cleans up
// what an interrupted one left.
const benchMeta = "agentbox-bench"

type runner struct {
	opts   Options
	c      *client.Client
	report *Report
	// templates holds the templates the daemon has, of opts.Templates.
	templates []string
}

// Run measures everything opts selects and returns the report. Failures
// of single samples are counted in the results; Run fails only when the
// daemon cannot be reached at all.
func Run(ctx context.Context, opts Options) (*Report, error) {
	opts.setDefaults()
	if opts.Client == nil {
		return nil, errors.New("bench: no client")
	}
	start := time.Now()
	r := &runner{opts: opts, c: opts.Client, report: &Report{Quick: opts.Quick}}
	h, err := r.c.Health(ctx)
	if err != nil {
		return nil, fmt.Errorf("reaching the daemon (start it with scripts/daemon.sh start): %w", err)
	}
	r.report.Machine = describeMachine(h.Version)
	r.cleanup(ctx)
	defer r.cleanup(ctx)

	have := map[string]bool{}
	if ts, err := r.c.ListTemplates(ctx); err == nil {
		for _, t := range ts {
			have[t.Name] = true
		}
	}
	for _, t := range opts.Templates {
		if have[t] {
			r.templates = append(r.templates, t)
		} else {
			r.note("template %q is missing: its lines are skipped (build it with scripts/build-template.sh %s)", t, t)
		}
	}

	// Baselines first, before sandboxes load the machine.
	r.baselines(ctx)
	if len(r.templates) > 0 {
		r.lifecycle(ctx)
		r.pool(ctx)
		r.state(ctx)
		r.execs(ctx)
		r.clients(ctx)
		r.fleet(ctx)
		r.mcpLines(ctx)
		r.mcpHostedLines(ctx)
		r.code(ctx)
		r.desktopLines(ctx)
		r.files(ctx)
		r.workloadLines(ctx)
		r.density(ctx)
		r.scale(ctx)
		r.throughput(ctx)
		r.e2b(ctx)
		r.desktopBaselines(ctx)
	}
	if err := ctx.Err(); err != nil {
		return r.report, err
	}
	r.report.Budgets = judge(r.report)
	r.report.Peers = Peers
	r.report.Duration = time.Since(start).Seconds()
	return r.report, nil
}

// want reports whether the measurement name is selected.
func (r *runner) want(name string) bool {
	return r.opts.Only == nil || r.opts.Only.MatchString(name)
}

func (r *runner) note(format string, args ...any) {
	r.report.Notes = append(r.report.Notes, fmt.Sprintf(format, args...))
}

// add records a result and prints a progress line.
func (r *runner) add(res Result) {
	r.report.Results = append(r.report.Results, res)
	if r.opts.Progress != nil {
		fmt.Fprintf(r.opts.Progress, "bench: %-28s n=%-4d err=%-3d p50 %8.2f ms  p99 %8.2f ms", res.Name, res.N, res.Errors, res.P50, res.P99)
		if res.RateUnit != "" {
			fmt.Fprintf(r.opts.Progress, "  %.1f %s", res.Rate, res.RateUnit)
		}
		fmt.Fprintln(r.opts.Progress)
	}
}

// sampleTimeout bounds one sample, so that a hung request fails the
// sample instead of the run; bigSampleTimeout is for 100 MiB transfers.
const (
	sampleTimeout    = 10 * time.Second
	bigSampleTimeout = 2 * time.Minute
	// giveUpAfter failures with no success end a line early.
	giveUpAfter = 5
)

// sample runs fn n times (after one untimed warm-up run when warm is set)
// and summarizes the successful runs' durations. fn times itself and
// returns the duration of the part being measured.
func (r *runner) sample(ctx context.Context, name, group string, n int, warm bool, fn func(ctx context.Context) (time.Duration, error)) Result {
	return r.sampleT(ctx, name, group, n, warm, sampleTimeout, fn)
}

// sampleT is sample with a timeout per sample.
func (r *runner) sampleT(ctx context.Context, name, group string, n int, warm bool, timeout time.Duration, fn0 func(ctx context.Context) (time.Duration, error)) Result {
	fn := func(ctx context.Context) (time.Duration, error) {
		ctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		return fn0(ctx)
	}
	if warm {
		if _, err := fn(ctx); err != nil {
			r.opts.Log.Warn("bench warm-up failed", "name", name, "err", err)
		}
	}
	var ds []time.Duration
	errs := 0
	var firstErr error
	for i := 0; i < n && ctx.Err() == nil; i++ {
		d, err := fn(ctx)
		if err != nil {
			errs++
			if firstErr == nil {
				firstErr = err
			}
			r.opts.Log.Warn("bench sample failed", "name", name, "err", err)
			if errs >= giveUpAfter && len(ds) == 0 {
				n = i + 1
				r.note("%s: gave up after %d failures in a row", name, errs)
				break
			}
			continue
		}
		ds = append(ds, d)
	}
	res := Result{Name: name, Group: group, Summary: Summarize(ds), Errors: errs}
	if firstErr != nil {
		res.Note = "first error: " + firstErr.Error()
		r.note("%s: %d of %d samples failed; first error: %v", name, errs, n, firstErr)
	}
	return res
}

// timed runs fn and returns how long it took.
func timed(fn func() error) (time.Duration, error) {
	t0 := time.Now()
	err := fn()
	return time.Since(t0), err
}

// createReq is the create request of every bench sandbox.
func createReq(template string) api.CreateSandboxRequest {
	return api.CreateSandboxRequest{
		Template:   template,
		Isolation:  "container",
		TTLSeconds: 900,
		Metadata:   map[string]string{benchMeta: "1"},
		// A pool serves only its own disk size (default 1024): the cold
		// lines stay cold on a daemon with a warm pool (poolReq asks for
		// the default).
		DiskMB: coldDiskMB,
	}
}

// destroy removes a sandbox, outliving ctx's cancellation.
// createThenDestroy times one create of req and destroys the sandbox
// untimed: a sample of the lines that measure create alone.
func (r *runner) createThenDestroy(ctx context.Context, req api.CreateSandboxRequest) (time.Duration, error) {
	return r.createThen(ctx, req, nil)
}

func (r *runner) destroy(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return r.c.DestroySandbox(ctx, id)
}

// cleanup destroys every sandbox a bench run made and left.
func (r *runner) cleanup(ctx context.Context) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	sbs, err := r.c.ListSandboxes(ctx, client.ListOptions{Metadata: map[string]string{benchMeta: "1"}})
	if err != nil {
		r.opts.Log.Warn("listing bench sandboxes", "err", err)
		return
	}
	for _, sb := range sbs {
		if err := r.c.DestroySandbox(ctx, sb.ID); err != nil {
			r.opts.Log.Warn("destroying a bench sandbox", "sandbox", sb.ID, "err", err)
		}
	}
}

// describeMachine reads what the report says about this host.
func describeMachine(daemonVersion string) Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version(), Date: time.Now().UTC(), Daemon: daemonVersion}
	m.Hostname, _ = os.Hostname()
	var u unix.Utsname
	if unix.Uname(&u) == nil {
		m.Kernel = unix.ByteSliceToString(u.Release[:])
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		m.MemTotal = meminfoBytes(string(b), "MemTotal")
	}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPUModel = strings.TrimSpace(v)
				break
			}
		}
	}
	m.Cgroup = cgroupVersion()
	return m
}
