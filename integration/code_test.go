package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// The code interpreter (docs/interpreter.md) against the real python
// template's ipykernel, pandas and matplotlib, on both tiers.

func needPython(t *testing.T) {
	t.Helper()
	if !env.hasPython {
		t.Fatal("the python template is missing: run scripts/build-template.sh python --no-import (scripts/test.sh does)")
	}
}

// runCode runs a cell and returns its execution, failing on API errors.
func runCode(t *testing.T, id string, req api.RunCodeRequest) *api.Execution {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	ex, err := env.client.RunCode(ctx, id, req, nil)
	if err != nil {
		t.Fatalf("run %q: %v", req.Code, err)
	}
	return ex
}

// mainText returns the main result's text, or a description of what the
// execution holds instead.
func mainText(ex *api.Execution) string {
	for _, r := range ex.Results {
		if r.IsMain {
			return r.Text
		}
	}
	if ex.Error != nil {
		return fmt.Sprintf("<no result; %s: %s>", ex.Error.Name, ex.Error.Value)
	}
	return fmt.Sprintf("<no result; status %s>", ex.Status)
}

func TestCodeInterpreterContainer(t *testing.T) { testCodeInterpreter(t, "container") }

func TestCodeInterpreterGvisor(t *testing.T) {
	needGvisor(t)
	testCodeInterpreter(t, "gvisor")
}

func testCodeInterpreter(t *testing.T, tier string) {
	needPython(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", Isolation: tier, MemoryMB: 1024})

	// State between cells; the first run starts the default context.
	t0 := time.Now()
	ex := runCode(t, id, api.RunCodeRequest{Code: "x = 41"})
	ready := time.Since(t0)
	if ex.Status != api.CodeStatusOK || ex.Context != "python" || ex.ExecutionCount != 1 {
		t.Fatalf("x = 41: %+v", ex)
	}
	t1 := time.Now()
	ex = runCode(t, id, api.RunCodeRequest{Code: "x + 1"})
	oneCell := time.Since(t1)
	if got := mainText(ex); got != "42" || ex.ExecutionCount != 2 {
		t.Fatalf("x + 1 = %s (count %d), want 42 (2)", got, ex.ExecutionCount)
	}

	// `1+1` through the API, p50 of 20, and the same from a jupyter_client
	// in the sandbox talking to a kernel of its own (the baseline).
	var rtts []time.Duration
	for range 20 {
		start := time.Now()
		if got := mainText(runCode(t, id, api.RunCodeRequest{Code: "1+1"})); got != "2" {
			t.Fatalf("1+1 = %s", got)
		}
		rtts = append(rtts, time.Since(start))
	}
	slices.Sort(rtts)
	p50 := rtts[len(rtts)/2]
	baseline := strings.TrimSpace(mustSh(t, id, `python3 - <<'EOF'
import statistics, time
from jupyter_client.manager import start_new_kernel
km, kc = start_new_kernel(kernel_name="python3", startup_timeout=120)
ts = []
for _ in range(20):
    t = time.perf_counter()
    kc.execute_interactive("1+1", timeout=60, output_hook=lambda m: None)
    ts.append((time.perf_counter() - t) * 1000)
print("%.1f ms" % statistics.median(ts))
kc.stop_channels()
km.shutdown_kernel(now=True)
EOF`))

	// Streaming order: stdout, a display, stderr, then the value.
	var order []string
	ex, err := env.client.RunCode(ctx, id, api.RunCodeRequest{Code: "from IPython.display import display, HTML\n" +
		"print('a', flush=True)\ndisplay(HTML('<b>shown</b>'))\nimport sys\nprint('b', file=sys.stderr, flush=True)\n'value'"},
		func(ev api.CodeEvent) {
			switch ev.Type {
			case api.CodeEventStdout, api.CodeEventStderr:
				order = append(order, ev.Type+":"+strings.TrimSpace(ev.Text))
			case api.CodeEventResult:
				order = append(order, fmt.Sprintf("result:%v", *ev.IsMain))
			case api.CodeEventEnd:
				order = append(order, "end")
			}
		})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(order, " "), "stdout:a result:false stderr:b result:true end"; got != want {
		t.Errorf("event order %q, want %q", got, want)
	}
	if len(ex.Results) != 2 || ex.Results[0].HTML != "<b>shown</b>" || ex.Results[1].Text != "'value'" {
		t.Errorf("results %+v", ex.Results)
	}

	// A DataFrame as HTML.
	ex = runCode(t, id, api.RunCodeRequest{Code: "import pandas as pd\npd.DataFrame({'city': ['Oslo', 'Lima'], 'n': [3, 5]})"})
	if len(ex.Results) != 1 || !strings.Contains(ex.Results[0].HTML, "<table") || !strings.Contains(ex.Results[0].HTML, "Lima") {
		t.Errorf("DataFrame: %+v", ex)
	}

	// A matplotlib chart as a PNG, decoded.
	t2 := time.Now()
	ex = runCode(t, id, api.RunCodeRequest{Code: "import matplotlib.pyplot as plt\nfig = plt.figure(figsize=(4, 3), dpi=100)\nplt.plot([1, 3, 2])\nplt.show()"})
	firstPlot := time.Since(t2)
	if len(ex.Results) != 1 || ex.Results[0].PNG == "" {
		t.Fatalf("plot: no PNG: %+v", ex)
	}
	b, err := base64.StdEncoding.DecodeString(ex.Results[0].PNG)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the PNG does not decode: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X < 300 || sz.X > 500 || sz.Y < 200 || sz.Y > 400 {
		t.Errorf("PNG is %v, want about 400x300", sz)
	}

	// An exception is a result, with a plain traceback naming the line.
	ex = runCode(t, id, api.RunCodeRequest{Code: "y = 1\n1/0"})
	if ex.Status != api.CodeStatusError || ex.Error == nil || ex.Error.Name != "ZeroDivisionError" ||
		!strings.Contains(ex.Error.Traceback, "----> 2 1/0") || strings.Contains(ex.Error.Traceback, "\x1b[") {
		t.Errorf("1/0: %+v %+v", ex, ex.Error)
	}

	// Per-run env: quotes and newlines round-trip, and it is gone after.
	val := "it's \"quoted\"\nand two lines"
	ex = runCode(t, id, api.RunCodeRequest{Code: "import os\nprint(os.environ['RUNVAR'], end='')", Env: map[string]string{"RUNVAR": val}})
	if got := strings.Join(ex.Logs.Stdout, ""); got != val {
		t.Errorf("per-run env: %q, want %q", got, val)
	}
	if got := mainText(runCode(t, id, api.RunCodeRequest{Code: "os.environ.get('RUNVAR', 'unset')"})); got != "'unset'" {
		t.Errorf("per-run env after the run: %s", got)
	}

	// Interrupting time.sleep(60) keeps the state.
	done := make(chan *api.Execution, 1)
	sleeping := make(chan struct{}, 1)
	go func() {
		ex, err := env.client.RunCode(ctx, id, api.RunCodeRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", TimeoutMs: -1},
			func(ev api.CodeEvent) {
				if ev.Type == api.CodeEventStdout {
					sleeping <- struct{}{}
				}
			})
		if err != nil {
			t.Error(err)
		}
		done <- ex
	}()
	<-sleeping // the cell is in time.sleep: an interrupt now cannot land before its import
	if _, err := env.client.InterruptCodeContext(ctx, id, "python"); err != nil {
		t.Fatal(err)
	}
	ex = <-done
	if ex == nil {
		t.FailNow()
	}
	if ex.Status != api.CodeStatusInterrupted || ex.Restarted || ex.Error == nil || ex.Error.Name != "KeyboardInterrupt" {
		t.Errorf("interrupted sleep: %+v", ex)
	}
	if got := mainText(runCode(t, id, api.RunCodeRequest{Code: "x"})); got != "41" {
		t.Errorf("x after the interrupt = %s, want 41", got)
	}

	// A timeout interrupts; the state is kept.
	ex = runCode(t, id, api.RunCodeRequest{Code: "import time\nprint('sleeping', flush=True)\ntime.sleep(60)", TimeoutMs: 3000})
	if ex.Status != api.CodeStatusTimeout || ex.Restarted {
		t.Errorf("timed-out sleep: %+v", ex)
	}
	if got := mainText(runCode(t, id, api.RunCodeRequest{Code: "x"})); got != "41" {
		t.Errorf("x after the timeout = %s, want 41", got)
	}

	// Idle memory of the kernel, while it holds pandas and matplotlib.
	c, err := env.client.GetCodeContext(ctx, id, "python")
	if err != nil {
		t.Fatal(err)
	}
	rss := strings.TrimSpace(mustSh(t, id, fmt.Sprintf("grep VmRSS /proc/%d/status", c.Pid)))

	// A cell deaf to the interrupt: restarted, and it says so.
	// A long loop in C never looks at the interrupt (ipykernel resets a
	// handler set by an earlier cell, so SIG_IGN there would not do).
	ex = runCode(t, id, api.RunCodeRequest{Code: "sum(range(10**13))", TimeoutMs: 500})
	if ex.Status != api.CodeStatusTimeout || !ex.Restarted || ex.Error == nil || ex.Error.Name != "TimeoutError" {
		t.Errorf("a cell deaf to SIGINT: %+v %+v", ex, ex.Error)
	}
	if ex := runCode(t, id, api.RunCodeRequest{Code: "x"}); ex.Error == nil || ex.Error.Name != "NameError" {
		t.Errorf("x after a restart: %+v, want NameError", ex)
	}

	// A kernel that dies is reported, and the next run starts a new one.
	ex = runCode(t, id, api.RunCodeRequest{Code: "import os\nos._exit(3)"})
	if ex.Status != api.CodeStatusKernelDied || ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "exit code 3") {
		t.Errorf("os._exit(3): %+v %+v", ex, ex.Error)
	}
	ex = runCode(t, id, api.RunCodeRequest{Code: "1+1"})
	if mainText(ex) != "2" || !ex.Restarted {
		t.Errorf("after the death: %+v", ex)
	}

	// Contexts: own state, cwd and env; listed; removed.
	cc, err := env.client.CreateCodeContext(ctx, id, api.CreateCodeContextRequest{ID: "other", Cwd: "/tmp", Env: map[string]string{"CTXVAR": "v1"}})
	if err != nil {
		t.Fatal(err)
	}
	if cc.ID != "other" || cc.Language != "python" || cc.State != api.CodeIdle || cc.Pid == 0 {
		t.Errorf("created context: %+v", cc)
	}
	freshRSS := strings.TrimSpace(mustSh(t, id, fmt.Sprintf("grep VmRSS /proc/%d/status", cc.Pid)))
	ex = runCode(t, id, api.RunCodeRequest{Context: "other", Code: "import os\n(os.getcwd(), os.environ['CTXVAR'], 'x' in globals())"})
	if got := mainText(ex); got != "('/tmp', 'v1', False)" {
		t.Errorf("other context: %s", got)
	}
	cs, err := env.client.ListCodeContexts(ctx, id)
	if err != nil || len(cs) != 2 || cs[0].ID != "python" || cs[1].ID != "other" {
		t.Errorf("contexts: %+v %v", cs, err)
	}
	if _, err := env.client.RestartCodeContext(ctx, id, "other"); err != nil {
		t.Error(err)
	}
	if err := env.client.RemoveCodeContext(ctx, id, "other"); err != nil {
		t.Error(err)
	}
	if _, err := env.client.GetCodeContext(ctx, id, "other"); err == nil {
		t.Error("a removed context is still there")
	}
	if _, err := env.client.RunCode(ctx, id, api.RunCodeRequest{Context: "nope", Code: "1"}, nil); err == nil || !strings.Contains(err.Error(), "no code context") {
		t.Errorf("unknown context: %v", err)
	}
	if _, err := env.client.RunCode(ctx, id, api.RunCodeRequest{Language: "cobol", Code: "1"}, nil); err == nil || !strings.Contains(err.Error(), "installed:") || !strings.Contains(err.Error(), "python (python3)") {
		t.Errorf("unknown language: %v", err)
	}

	t.Logf("%s tier: `1+1` p50 of 20 through the API %v, jupyter_client in the sandbox to its own kernel %s", tier, p50.Round(100*time.Microsecond), baseline)
	t.Logf("%s tier: first run (kernel start + cell) %v; `x + 1` %v; first matplotlib PNG %v; idle kernel: fresh %s, with pandas and matplotlib loaded %s",
		tier, ready.Round(time.Millisecond), oneCell.Round(time.Millisecond), firstPlot.Round(time.Millisecond), freshRSS, rss)
}

func waitCodeState(t *testing.T, id, ctxID, state string) {
	t.Helper()
	var last string
	for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		c, err := env.client.GetCodeContext(context.Background(), id, ctxID)
		if err == nil && c.State == state {
			return
		}
		last = fmt.Sprint(c, err)
	}
	t.Fatalf("context %s never became %s: %s", ctxID, state, last)
}

// TestCodeInterpreterParallel: 10 contexts in one sandbox run at once,
// each with its own state.
func TestCodeInterpreterParallel(t *testing.T) {
	needPython(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", MemoryMB: 2048})
	var wg sync.WaitGroup
	errs := make(chan string, 10)
	for i := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
			defer cancel()
			name := "c" + strconv.Itoa(i)
			if _, err := env.client.CreateCodeContext(ctx, id, api.CreateCodeContextRequest{ID: name}); err != nil {
				errs <- fmt.Sprintf("create %s: %v", name, err)
				return
			}
			for _, code := range []string{fmt.Sprintf("v = %d", i), "import time; time.sleep(0.5); v * 10"} {
				ex, err := env.client.RunCode(ctx, id, api.RunCodeRequest{Context: name, Code: code}, nil)
				if err != nil {
					errs <- fmt.Sprintf("%s: %v", name, err)
					return
				}
				if ex.Status != api.CodeStatusOK {
					errs <- fmt.Sprintf("%s: %q: %+v", name, code, ex)
					return
				}
				if strings.Contains(code, "v * 10") && mainText(ex) != strconv.Itoa(i*10) {
					errs <- fmt.Sprintf("%s: v * 10 = %s", name, mainText(ex))
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	cs, err := env.client.ListCodeContexts(context.Background(), id)
	if err != nil || len(cs) != 10 {
		t.Errorf("%d contexts, %v", len(cs), err)
	}
}

// TestCodeInterpreterOOM: a memory bomb in a 512 MB sandbox kills the
// kernel, which is reported with the OOM; the next cell works.
func TestCodeInterpreterOOM(t *testing.T) {
	needPython(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", MemoryMB: 512})
	runCode(t, id, api.RunCodeRequest{Code: "x = 1"})
	ex := runCode(t, id, api.RunCodeRequest{Code: "hog = []\nwhile True:\n    hog.append(b'x' * (64 << 20))"})
	if ex.Status != api.CodeStatusKernelDied || ex.Error == nil || ex.Error.Name != "KernelDied" || !strings.Contains(ex.Error.Value, "out of memory") {
		t.Fatalf("memory bomb: %+v %+v", ex, ex.Error)
	}
	ex = runCode(t, id, api.RunCodeRequest{Code: "1+1"})
	if mainText(ex) != "2" || !ex.Restarted {
		t.Errorf("after the OOM: %+v", ex)
	}
	c, _ := env.client.GetCodeContext(context.Background(), id, "python")
	if c == nil || !strings.Contains(c.LastExit, "out of memory") {
		t.Errorf("context after the OOM: %+v", c)
	}
}

// TestCodeInterpreterPauseResume: a paused and resumed sandbox's kernel
// keeps its state.
func TestCodeInterpreterPauseResume(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python"})
	runCode(t, id, api.RunCodeRequest{Code: "x = 'kept'"})
	if _, err := env.client.PauseSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.ResumeSandbox(ctx, id); err != nil {
		t.Fatal(err)
	}
	if ex := runCode(t, id, api.RunCodeRequest{Code: "x"}); mainText(ex) != "'kept'" || ex.Restarted {
		t.Errorf("after pause/resume: %+v", ex)
	}
}

// TestCodeInterpreterGvisorFork: on the gvisor tier, children forked with
// memory each continue the parent's live kernel: x defined in the parent
// is there in each, and each then goes its own way.
func TestCodeInterpreterGvisorFork(t *testing.T) {
	needGvisor(t)
	needPython(t)
	ctx := context.Background()
	parent := newSandbox(t, api.CreateSandboxRequest{Template: "python", Isolation: "gvisor", MemoryMB: 1024})
	runCode(t, parent, api.RunCodeRequest{Code: "x = 'from the parent'\nn = 0"})
	kids, err := env.client.ForkSandboxWithMemory(ctx, parent, 3)
	if err != nil {
		t.Fatalf("fork with memory: %v", err)
	}
	for _, k := range kids {
		t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), k.ID) })
	}
	if len(kids) != 3 {
		t.Fatalf("%d children", len(kids))
	}
	for i, k := range kids {
		ex := runCode(t, k.ID, api.RunCodeRequest{Code: fmt.Sprintf("n += %d\n(x, n)", i+1)})
		if got, want := mainText(ex), fmt.Sprintf("('from the parent', %d)", i+1); got != want || ex.Restarted {
			t.Errorf("child %d: %s (restarted %v), want %s", i, got, ex.Restarted, want)
		}
	}
	if got := mainText(runCode(t, parent, api.RunCodeRequest{Code: "(x, n)"})); got != "('from the parent', 0)" {
		t.Errorf("parent after the fork: %s", got)
	}
}

// TestCodeInterpreterR: the python template's second kernel, R (Debian's
// r-cran-irkernel, found by its kernelspec like any other): a run keeps
// its state, gives rich results and turns an R error into an error
// result, beside the python context of the same sandbox.
func TestCodeInterpreterR(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", MemoryMB: 1024})
	// IRkernel shows a cell's value as display data (no execute_result),
	// so its results are not main: the first one is the value.
	value := func(ex *api.Execution) api.CodeResult {
		if len(ex.Results) == 0 {
			return api.CodeResult{Text: mainText(ex)}
		}
		return ex.Results[0]
	}
	if ex := runCode(t, id, api.RunCodeRequest{Code: "x <- 40 + 2\nx", Language: "r"}); value(ex).Text != "[1] 42" {
		t.Fatalf("R: %+v (error %+v)", ex.Results, ex.Error)
	}
	ex := runCode(t, id, api.RunCodeRequest{Code: "data.frame(a = c(x, x * 2))", Language: "r"})
	if got := value(ex); !strings.Contains(got.Text, "84") || !strings.Contains(got.HTML, "<table") {
		t.Errorf("an R data frame (state kept, as an HTML table): %+v", ex.Results)
	}
	if ex := runCode(t, id, api.RunCodeRequest{Code: `stop("boom")`, Language: "r"}); ex.Error == nil || !strings.Contains(ex.Error.Value, "boom") {
		t.Errorf("an R error is not an error result: %+v", ex)
	}
	if got := mainText(runCode(t, id, api.RunCodeRequest{Code: "'python still ' + str(6 * 7)"})); got != "'python still 42'" {
		t.Errorf("the python context beside R: %s", got)
	}
	ctxs, err := env.client.ListCodeContexts(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	langs := map[string]bool{}
	for _, c := range ctxs {
		langs[c.Language] = true
	}
	if !langs["r"] || !langs["python"] {
		t.Errorf("contexts %+v, want an r and a python one", ctxs)
	}
}

// TestCodeInterpreterGvisorMemory: on the gvisor tier a live kernel's
// state survives a snapshot with memory (a sandbox created from it runs
// the same kernel) and a pause to disk (the resumed sandbox's kernel
// still has it), without a restart.
func TestCodeInterpreterGvisorMemory(t *testing.T) {
	needGvisor(t)
	needPython(t)
	ctx := context.Background()
	src := newSandbox(t, api.CreateSandboxRequest{Template: "python", Isolation: "gvisor", MemoryMB: 1024})
	runCode(t, src, api.RunCodeRequest{Code: "x = 'before the snapshot'"})
	name := "kernel-" + randHex(4)
	snap, err := env.client.CreateMemorySnapshot(ctx, src, name)
	if err != nil {
		t.Fatalf("snapshot with memory: %v", err)
	}
	runCode(t, src, api.RunCodeRequest{Code: "x = 'after the snapshot'"})
	child := newSandbox(t, api.CreateSandboxRequest{Snapshot: name})
	t.Cleanup(func() { _ = env.client.DeleteSnapshot(context.Background(), snap.ID) })
	if ex := runCode(t, child, api.RunCodeRequest{Code: "x"}); mainText(ex) != "'before the snapshot'" || ex.Restarted {
		t.Errorf("created from the memory snapshot: %s (restarted %v), want 'before the snapshot'", mainText(ex), ex.Restarted)
	}
	if _, err := env.client.PauseSandboxToDisk(ctx, src); err != nil {
		t.Fatalf("pause to disk: %v", err)
	}
	if _, err := env.client.ResumeSandbox(ctx, src); err != nil {
		t.Fatalf("resume from disk: %v", err)
	}
	if ex := runCode(t, src, api.RunCodeRequest{Code: "x"}); mainText(ex) != "'after the snapshot'" || ex.Restarted {
		t.Errorf("after pause to disk and resume: %s (restarted %v), want 'after the snapshot'", mainText(ex), ex.Restarted)
	}
}

// TestExampleCodeInterpreter runs examples/code_interpreter.py: CSV ->
// pandas -> chart through run_code only; the chart is a real PNG.
func TestExampleCodeInterpreter(t *testing.T) {
	needPython(t)
	out := filepath.Join(t.TempDir(), "chart.png")
	text, err := runExample(t, "code_interpreter.py", "--out", out)
	if err != nil {
		t.Fatalf("code_interpreter.py failed: %v", err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatalf("no chart written: %v", err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("the chart does not decode as a PNG: %v", err)
	}
	if sz := img.Bounds().Size(); sz.X < 400 || sz.Y < 200 {
		t.Errorf("chart is %v", sz)
	}
	for _, want := range []string{"rows: 36", "revenue by region:", "north", "chart: "} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q", want)
		}
	}
	// Without ipykernel (the base template) it fails with a hint.
	text, err = runExample(t, "code_interpreter.py", "--template", "base", "--out", out+".2")
	if err == nil || !strings.Contains(text, "--template python") {
		t.Fatalf("code_interpreter.py --template base: %v, want a failure that points to the python template\n%s", err, text)
	}
}

// TestCLICode: agentbox code runs cells (-c, a file, stdin as a REPL),
// saves images to the files it names and exits 1 when a cell raised.
func TestCLICode(t *testing.T) {
	needPython(t)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python"})
	out, errOut, code := cli(t, "", "code", id, "-c", "x = 20\nprint('hello')\nx + 1")
	if code != 0 || out != "hello\n21\n" {
		t.Fatalf("code -c: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "plot.py")
	os.WriteFile(script, []byte("import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.show()\n"), 0o644)
	out, errOut, code = cli(t, "", "code", "--out-dir", dir, id, script)
	want := "[png saved to " + filepath.Join(dir, "out-1.png") + "]\n"
	if code != 0 || out != want {
		t.Fatalf("code FILE: exit %d, stdout %q (want %q), stderr %q", code, out, want, errOut)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out-1.png"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := png.Decode(bytes.NewReader(b)); err != nil {
		t.Fatalf("out-1.png: %v", err)
	}
	out, errOut, code = cli(t, "", "code", id, "-c", "1/0")
	if code != 1 || !strings.Contains(errOut, "ZeroDivisionError") {
		t.Fatalf("code -c 1/0: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	// The REPL: state from the -c runs is there; a block ends at an empty line.
	out, errOut, code = cli(t, "for i in range(2):\n    print(i)\n\nx * 2\n", "code", id)
	if code != 0 || out != "0\n1\n40\n" {
		t.Fatalf("REPL: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
