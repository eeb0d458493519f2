package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// GroupClients holds what the CLI and the Python SDK add to the API they
// call: each line is judged against the API line it wraps.
const GroupClients = "clients"

const (
	lineCLIHelp  = "clients/cli --help"
	lineCLIExec  = "clients/cli exec true"
	linePyCreate = "clients/python-sdk create"
	linePyExec   = "clients/python-sdk exec true"
)

// ClientOptions say where the clients lines find the CLI and the Python
// SDK, and how they reach the daemon.
type ClientOptions struct {
	// CLI is the agentbox binary; "" skips its lines.
	CLI string
	// PythonSDK is sdk/python of a checkout, put on PYTHONPATH; "" skips
	// its lines.
	PythonSDK string
	// Host and Key are AGENTBOX_HOST and AGENTBOX_API_KEY for both
	// ("" leaves the client's default).
	Host, Key string
}

// env is the environment of a client process: the bench's own without
// its AGENTBOX_ variables, then the options'.
func (o ClientOptions) env(extra ...string) []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "AGENTBOX_") {
			out = append(out, kv)
		}
	}
	if o.Host != "" {
		out = append(out, "AGENTBOX_HOST="+o.Host)
	}
	if o.Key != "" {
		out = append(out, "AGENTBOX_API_KEY="+o.Key)
	}
	return append(out, extra...)
}

// clients measures the CLI's start (`agentbox --help`, against fork+exec
// of /bin/true), its exec of `true` in a running sandbox (against the
// API's, exec/true), and the Python SDK's Sandbox.create and exec of
// `true` (against create/<first template> and exec/true, the same
// requests through the Go client): the issue's "no overhead in the
// clients".
func (r *runner) clients(ctx context.Context) {
	o := r.opts.Clients
	n := max(r.opts.N, 20)
	if r.want(lineCLIHelp) || r.want(lineCLIExec) {
		if o.CLI == "" {
			r.note("clients/cli lines skipped: no agentbox binary beside agentboxd or on PATH (make install)")
		} else {
			r.cliLines(ctx, o, n)
		}
	}
	if r.want(linePyCreate) || r.want(linePyExec) {
		py := pythonBin()
		switch {
		case o.PythonSDK == "":
			r.note("clients/python-sdk lines skipped: run `agentbox bench` from the repository's root (they use sdk/python)")
		case exec.Command(py, "-c", "import httpx").Run() != nil:
			r.note("clients/python-sdk lines skipped: %s lacks httpx: apt-get install python3-httpx (scripts/install-deps.sh)", py)
		default:
			r.pythonLines(ctx, o, py, n)
		}
	}
}

func (r *runner) cliLines(ctx context.Context, o ClientOptions, n int) {
	run := func(ctx context.Context, args ...string) (time.Duration, error) {
		cmd := exec.CommandContext(ctx, o.CLI, args...)
		cmd.Env = o.env()
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = io.Discard, &stderr
		d, err := timed(cmd.Run)
		if err != nil {
			err = fmt.Errorf("agentbox %s: %w: %s", strings.Join(args, " "), err, lastLine(stderr.String()))
		}
		return d, err
	}
	if r.want(lineCLIHelp) {
		res := r.sample(ctx, lineCLIHelp, GroupClients, n, true, func(ctx context.Context) (time.Duration, error) {
			return run(ctx, "--help")
		})
		res.Floor = "baseline/fork-exec"
		r.add(res)
	}
	if r.want(lineCLIExec) {
		r.withSandbox(ctx, lineCLIExec, func(id string) {
			res := r.sample(ctx, lineCLIExec, GroupClients, n, true, func(ctx context.Context) (time.Duration, error) {
				return run(ctx, "exec", id, "--", "true")
			})
			res.Floor = "exec/true"
			r.add(res)
		})
	}
}

// pyClients times Sandbox.create (the request of the create lines: the
// same template, disk size, TTL and metadata, so no warm pool serves it;
// each destroyed untimed) and exec(["true"]) in one sandbox, after two
// warm-up calls of each, in one Python process with the SDK's shared
// connection pool, as a user's program runs them. It prints one JSON
// line: {"create_ms": [...], "exec_ms": [...]}.
const pyClients = `
import json, sys, time
from agentbox import Sandbox
n, template, disk_mb, meta = int(sys.argv[1]), sys.argv[2], int(sys.argv[3]), sys.argv[4]
kw = dict(isolation="container", ttl_seconds=900, disk_mb=disk_mb, metadata={meta: "1"})
create, execs = [], []
for i in range(n + 2):
    t = time.perf_counter()
    s = Sandbox.create(template, **kw)
    if i >= 2:
        create.append((time.perf_counter() - t) * 1000)
    s.destroy()
s = Sandbox.create(template, **kw)
try:
    for i in range(n + 2):
        t = time.perf_counter()
        res = s.exec(["true"])
        if i >= 2:
            execs.append((time.perf_counter() - t) * 1000)
        if res.exit_code != 0:
            sys.exit("true exited %d" % res.exit_code)
finally:
    s.destroy()
print(json.dumps({"create_ms": create, "exec_ms": execs}))
`

func (r *runner) pythonLines(ctx context.Context, o ClientOptions, py string, n int) {
	t := r.templates[0]
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-c", pyClients, strconv.Itoa(n), t, strconv.Itoa(coldDiskMB), benchMeta)
	cmd.Env = o.env("PYTHONPATH=" + o.PythonSDK)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var got struct {
		Create []float64 `json:"create_ms"`
		Exec   []float64 `json:"exec_ms"`
	}
	if err == nil {
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		err = json.Unmarshal([]byte(lines[len(lines)-1]), &got)
	}
	if err != nil || len(got.Create) == 0 || len(got.Exec) == 0 {
		r.note("clients/python-sdk lines failed: %v: %s", err, lastLine(stderr.String()))
		return
	}
	for _, l := range []struct {
		name, floor string
		ms          []float64
	}{
		{linePyCreate + " (" + t + ")", "create/" + t, got.Create},
		{linePyExec, "exec/true", got.Exec},
	} {
		r.add(Result{Name: l.name, Group: GroupClients, Summary: summarizeMS(l.ms), Floor: l.floor})
	}
}
