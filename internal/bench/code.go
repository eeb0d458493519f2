package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
)

// GroupCode holds the code interpreter's lines (docs/interpreter.md): a
// cell through the API beside the same cell sent by jupyter_client to a
// kernel directly, in the same sandbox; create to the first result, cold
// and from a pool of started kernels; a waiting kernel's memory.
const GroupCode = "code"

const (
	codeTemplate  = "python"
	lineCodeCold  = "code/create->first 1+1"
	lineCodePool  = "code/create->first 1+1 (pool)"
	lineCodeCell  = "code/cell 1+1"
	lineCodeJC    = "code/jupyter_client 1+1"
	lineCodeIdle  = "code/idle context memory"
	codeScriptDir = "/tmp/agentbox-bench"
)

// jupyterClientScript times argv[1] round trips of `1+1` sent by
// jupyter_client to a kernel it started itself (the baseline a cell
// through the API is judged against) and prints them in ms as JSON.
const jupyterClientScript = `import json, sys, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3")
try:
    quiet = lambda msg: None
    kc.execute_interactive("1+1", timeout=30, output_hook=quiet)
    out = []
    for _ in range(int(sys.argv[1])):
        t = time.perf_counter()
        reply = kc.execute_interactive("1+1", timeout=30, output_hook=quiet)
        out.append((time.perf_counter() - t) * 1000)
        assert reply["content"]["status"] == "ok", reply["content"]
    print(json.dumps(out))
finally:
    kc.stop_channels()
    km.shutdown_kernel(now=True)
`

// code measures the interpreter's lines on the python template.
func (r *runner) code(ctx context.Context) {
	if !r.wantAny(lineCodeCold, lineCodePool, lineCodeCell, lineCodeJC, lineCodeIdle) {
		return
	}
	if _, err := r.c.GetTemplate(ctx, codeTemplate); err != nil {
		r.note("code lines skipped: template %q is missing (scripts/build-template.sh %s): %v", codeTemplate, codeTemplate, err)
		return
	}
	n := max(r.opts.N/5, 2) // a cold create to a kernel is over a second
	if r.want(lineCodeCold) {
		r.add(r.sampleT(ctx, lineCodeCold, GroupCode, n, false, time.Minute, func(ctx context.Context) (time.Duration, error) {
			return r.createToFirstCell(ctx, createReq(codeTemplate))
		}))
	}
	if r.want(lineCodePool) {
		r.codePool(ctx, n)
	}
	if !r.wantAny(lineCodeCell, lineCodeJC, lineCodeIdle) {
		return
	}
	req := createReq(codeTemplate)
	req.MemoryMB = 1024
	sb, err := r.c.CreateSandbox(ctx, req)
	if err != nil {
		r.note("code lines skipped: creating a %s sandbox: %v", codeTemplate, err)
		return
	}
	defer r.destroy(ctx, sb.ID)
	cells := r.opts.N * 2
	if r.want(lineCodeJC) {
		r.jupyterClientLine(ctx, sb.ID, cells)
	}
	if r.want(lineCodeCell) {
		res := r.sample(ctx, lineCodeCell, GroupCode, cells, true, func(ctx context.Context) (time.Duration, error) {
			var ex *api.Execution
			d, err := timed(func() (err error) {
				ex, err = r.c.RunCode(ctx, sb.ID, api.RunCodeRequest{Code: "1+1"}, nil)
				return err
			})
			if err == nil {
				err = checkTwo(ex)
			}
			return d, err
		})
		res.Floor = lineCodeJC
		r.add(res)
	}
	if r.want(lineCodeIdle) {
		r.idleContextMemory(ctx, sb.ID)
	}
}

// createToFirstCell times a create of req and its first cell, `1+1`,
// and destroys the sandbox untimed.
func (r *runner) createToFirstCell(ctx context.Context, req api.CreateSandboxRequest) (time.Duration, error) {
	return r.createThen(ctx, req, func(ctx context.Context, id string) error {
		ex, err := r.c.RunCode(ctx, id, api.RunCodeRequest{Code: "1+1"}, nil)
		if err != nil {
			return err
		}
		return checkTwo(ex)
	})
}

// checkTwo checks a `1+1` cell's result.
func checkTwo(ex *api.Execution) error {
	for _, res := range ex.Results {
		if res.IsMain && res.Text == "2" {
			return nil
		}
	}
	return fmt.Errorf("1+1 gave %+v", ex)
}

// codePool times create -> first cell served from a pool whose sandboxes
// started their python kernel while they waited ([[pool]] code =
// "python"; docs/config.md).
func (r *runner) codePool(ctx context.Context, n int) {
	i, _, err := r.poolWhere(ctx, func(p api.PoolStatus) bool { return p.Template == codeTemplate && p.Code == "python" })
	if err != nil {
		r.note("%s skipped: %v", lineCodePool, err)
		return
	}
	if i < 0 {
		r.note("%s skipped: the daemon has no pool of %s with started kernels; add one to its config:"+
			" [[pool]] template = %q code = \"python\" size = 2, and restart it (docs/config.md)", lineCodePool, codeTemplate, codeTemplate)
		return
	}
	r.add(r.sampleT(ctx, lineCodePool, GroupCode, n, false, time.Minute, func(ctx context.Context) (time.Duration, error) {
		return r.servedFrom(ctx, i, func() (time.Duration, error) { return r.createToFirstCell(ctx, poolReq(codeTemplate)) })
	}))
}

// jupyterClientLine runs jupyterClientScript in sandbox id and records its
// round trips as the baseline line.
func (r *runner) jupyterClientLine(ctx context.Context, id string, n int) {
	script := codeScriptDir + "/jc.py"
	if _, err := r.c.WriteFile(ctx, id, script, strings.NewReader(jupyterClientScript), 0o644); err != nil {
		r.note("%s skipped: writing its script: %v", lineCodeJC, err)
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	res, err := r.c.Exec(cctx, id, api.ExecRequest{Cmd: []string{"python3", script, strconv.Itoa(n)}})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	var ms []float64
	if err == nil {
		err = json.Unmarshal([]byte(res.Stdout), &ms)
	}
	if err != nil {
		r.note("%s failed: %v", lineCodeJC, err)
		return
	}
	ds := make([]time.Duration, len(ms))
	for i, v := range ms {
		ds[i] = time.Duration(v * float64(time.Millisecond))
	}
	r.add(Result{Name: lineCodeJC, Group: GroupBaseline, Summary: Summarize(ds)})
}

// idleContextMemory records the PSS of an idle default context's kernel
// (after the cells above ran in it) as the line's rate, in MiB.
func (r *runner) idleContextMemory(ctx context.Context, id string) {
	if _, err := r.c.RunCode(ctx, id, api.RunCodeRequest{Code: "1+1"}, nil); err != nil {
		r.note("%s failed: %v", lineCodeIdle, err)
		return
	}
	ccs, err := r.c.ListCodeContexts(ctx, id)
	if err != nil || len(ccs) == 0 || ccs[0].Pid == 0 {
		r.note("%s failed: no live context (%v)", lineCodeIdle, err)
		return
	}
	res, err := r.c.Exec(ctx, id, api.ExecRequest{Shell: fmt.Sprintf("awk '/^Pss:/ {print $2}' /proc/%d/smaps_rollup", ccs[0].Pid)})
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	var kb float64
	if err == nil {
		kb, err = strconv.ParseFloat(strings.TrimSpace(res.Stdout), 64)
	}
	if err != nil {
		r.note("%s failed: reading the kernel's PSS: %v", lineCodeIdle, err)
		return
	}
	r.add(Result{Name: lineCodeIdle, Group: GroupCode, Summary: Summary{N: 1}, Rate: kb / 1024, RateUnit: "MiB PSS"})
}
