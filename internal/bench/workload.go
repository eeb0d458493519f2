package bench

import (
	"archive/tar"
	"bytes"
	"context"
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
)

// GroupWorkload is the group of the workload lines: real work timed
// inside a sandbox of each tier, each judged against the container tier.
const GroupWorkload = "workload"

// suite is the test suite the bench brings (written for it, not fetched):
// a small bookkeeping library in pure Python with its unittest tests,
// which parse, write and read temporary files and start the library's
// command line as subprocesses, as a project's own suite does.
//
//go:embed all:suite
var suite embed.FS

// suiteDir is where the suite is uploaded inside the sandbox.
const suiteDir = "/tmp/agentbox-bench-suite"

// workload is one line of the workload section: a shell script timed
// inside the sandbox.
type workload struct {
	name   string
	script string
}

// workloads are the lines (issue 29), timed inside the sandbox so
// that only the work counts, not the exec round trip.
var workloads = []workload{
	{"cpu-loop", `python3 -c 'x=0
for i in range(10**7): x+=i'`},
	{"python-start", `for i in $(seq 20); do python3 -c pass; done`},
	{"python-imports", `for i in $(seq 5); do python3 -c "import email, json, http.client, unittest, asyncio, decimal, xml.dom.minidom"; done`},
	{"stat-20k", `find /usr -xdev | head -20000 | xargs -d '\n' stat`},
	{"small-files", `d=$(mktemp -d); for i in $(seq 2000); do echo "file $i" > $d/f$i; done; cat $d/* >/dev/null; rm -rf $d`},
	{"fork-exec", `for i in $(seq 500); do /bin/true; done`},
	{"test-suite", `cd ` + suiteDir + ` && python3 -B -m unittest discover -q`},
}

// workloadTimeout bounds one workload run (the stat and test-suite lines
// take tens of seconds on a loaded gvisor host).
const workloadTimeout = 5 * time.Minute

// workloadTemplate is the template the workloads need: bash, python3 and
// coreutils, as in the base template.
const workloadTemplate = "base"

// workloadTiers orders the daemon's tiers: the container tier first, as
// every other tier's line is judged against it.
func workloadTiers(drivers []string) []string {
	var tiers []string
	if slices.Contains(drivers, "container") {
		tiers = append(tiers, "container")
	}
	for _, d := range drivers {
		if d != "container" {
			tiers = append(tiers, d)
		}
	}
	return tiers
}

// workloadName is the name of a workload line.
func workloadName(w, tier string) string { return "workload/" + w + " (" + tier + ")" }

// workloadsWanted reports whether any workload line of tier is selected.
func (r *runner) workloadsWanted(tier string) bool {
	for _, w := range workloads {
		if r.want(workloadName(w.name, tier)) {
			return true
		}
	}
	return false
}

// workloadLines runs every workload in one sandbox of each tier the daemon
// has, on the base template, and judges each tier's line against the
// container tier's.
func (r *runner) workloadLines(ctx context.Context) {
	h, err := r.c.Health(ctx)
	if err != nil {
		r.note("workload: skipped: %v", err)
		return
	}
	tiers := workloadTiers(h.Drivers)
	var wanted []string
	for _, t := range tiers {
		if r.workloadsWanted(t) {
			wanted = append(wanted, t)
		}
	}
	if len(wanted) == 0 {
		return
	}
	if !slices.Contains(r.templates, workloadTemplate) {
		r.note("workload: skipped: the lines need the %s template (python3, bash); build it with scripts/build-template.sh %s", workloadTemplate, workloadTemplate)
		return
	}
	archive, err := suiteArchive()
	if err != nil {
		r.note("workload: skipped: %v", err)
		return
	}
	n := 3
	if r.opts.Quick {
		n = 1
	}
	for _, tier := range wanted {
		r.workloadTier(ctx, tier, n, archive)
	}
}

// workloadTier runs the workloads n times each in one sandbox of tier.
func (r *runner) workloadTier(ctx context.Context, tier string, n int, archive []byte) {
	req := createReq(workloadTemplate)
	req.Isolation = tier
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("workload (%s): skipped, could not create a sandbox: %v", tier, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	if err := r.c.UploadArchive(ctx, sb.ID, suiteDir, bytes.NewReader(archive)); err != nil {
		r.note("workload (%s): skipped, could not upload the test suite: %v", tier, err)
		return
	}
	for _, w := range workloads {
		name := workloadName(w.name, tier)
		if !r.want(name) {
			continue
		}
		// The p50 of three runs leaves out the first, which may find
		// the template's files outside the host's page cache (a quick
		// run's single sample may not: it is a smoke test).
		res := r.sampleT(ctx, name, GroupWorkload, n, false, workloadTimeout, func(ctx context.Context) (time.Duration, error) {
			return r.timeInside(ctx, sb.ID, w.script)
		})
		if tier != "container" {
			res.Floor = workloadName(w.name, "container")
		}
		r.add(res)
	}
}

// timeInside runs script in the sandbox and returns how long it ran, as
// the sandbox's clock measured it; a script that fails fails the sample.
func (r *runner) timeInside(ctx context.Context, id, script string) (time.Duration, error) {
	wrapped := "s=$(date +%s%N); ( " + script + " ) >/dev/null 2>/tmp/agentbox-bench.err; rc=$?; e=$(date +%s%N); echo $rc $((e-s))"
	res, err := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"bash", "-c", wrapped}})
	if err != nil {
		return 0, err
	}
	f := strings.Fields(res.Stdout)
	if res.ExitCode != 0 || len(f) != 2 {
		return 0, fmt.Errorf("timing wrapper: exit %d, stdout %q, stderr %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	ns, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("timing wrapper printed %q", res.Stdout)
	}
	if f[0] != "0" {
		tail, _ := r.c.Exec(ctx, id, api.ExecRequest{Cmd: []string{"tail", "-c", "400", "/tmp/agentbox-bench.err"}})
		msg := ""
		if tail != nil {
			msg = tail.Stdout
		}
		return 0, fmt.Errorf("the workload exited %s: %s", f[0], strings.TrimSpace(msg))
	}
	return time.Duration(ns), nil
}

// suiteArchive is the embedded test suite as a tar stream, its paths
// relative to the suite's root.
func suiteArchive() ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := fs.WalkDir(suite, "suite", func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == "suite" {
			return err
		}
		rel := strings.TrimPrefix(path, "suite/")
		if d.Name() == "__pycache__" {
			return fs.SkipDir // a local run's leftovers
		}
		if d.IsDir() {
			return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: rel + "/", Mode: 0o755})
		}
		b, err := suite.ReadFile(path)
		if err != nil {
			return err
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: rel, Mode: 0o644, Size: int64(len(b))}); err != nil {
			return err
		}
		_, err = tw.Write(b)
		return err
	})
	if err == nil {
		err = tw.Close()
	}
	if err != nil {
		return nil, fmt.Errorf("the bench's test suite: %w", err)
	}
	return buf.Bytes(), nil
}
