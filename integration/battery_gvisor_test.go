package integration

// Battery verdicts for the gvisor tier where the container tier's read
// host state that gVisor does not have: its sandbox's processes are tasks
// of gVisor's kernel, not host processes, and its pids limit lives in
// gVisor's own cgroupfs, where the agent puts every exec.

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// itemForkBombGvisor: the same fork and thread bombs; the limit is judged
// inside (gVisor's workload pids.max and pids.current, read through the
// agent) and on the host (the host threads of gVisor itself stay within
// the sandbox cgroup's pids.max).
func itemForkBombGvisor(t *testing.T, b *battery) {
	const limit = 64
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	const pidsDir = "/.agentbox/cgroup/pids/workload"
	if got := mustSh(t, id, "cat "+pidsDir+"/pids.max"); got != strconv.Itoa(limit) {
		t.Errorf("gVisor workload pids.max = %q, want %d", got, limit)
	}
	hostMax := readHostInt(t, filepath.Join(cgroupPath("pids", id), "pids.max"))
	hostPeak := sample(50*time.Millisecond, func() int64 { return int64(len(sandboxPids(id))) })
	res := b.hostile(t, id, api.ExecRequest{Shell: `for i in $(seq 300); do sleep 30 & done 2>/dev/null
bomb() { bomb | bomb & }; bomb 2>/dev/null; sleep 30`, TimeoutMs: 3000})
	answers := alive(id)
	id2 := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	thr := b.hostile(t, id2, api.ExecRequest{Cmd: []string{"/tmp/probe", "threads", "1000"}, TimeoutMs: 3000})
	maxHost := hostPeak.Stop()
	after := "?"
	if r, err := execOnce(id, "cat "+pidsDir+"/pids.current"); err == nil {
		after = strings.TrimSpace(r)
	}
	evidence(t, "fork bomb under gVisor pids.max %d and RLIMIT_NPROC limit+64: timed_out=%v, next exec: %v, workload pids.current after %s; thread bomb: exit %d %s, last output %s; host processes in the sandbox's cgroup peak %d (host pids.max %d: gVisor's own threads)",
		limit, res.TimedOut, errClass(answers), after, thr.ExitCode, lastLine(thr.Stderr), lastLine(thr.Stdout), maxHost, hostMax)
	if thr.ExitCode == 0 {
		t.Errorf("the thread bomb finished 1000 threads under a pids limit of %d: %s", limit, thr.Stdout)
	}
	// The bound that holds is RLIMIT_NPROC = limit + the agent's reserve
	// of 64 per uid (gVisor's pids cgroup charges arbitrarily; see
	// docs/gvisor.md), so that is what is judged.
	if n, err := strconv.Atoi(after); err == nil && n > limit+64 {
		t.Errorf("gVisor's workload holds %d tasks; the bound is %d + 64", n, limit)
	}
	if maxHost > hostMax {
		t.Errorf("the host saw %d processes in the sandbox's cgroup; its pids.max is %d", maxHost, hostMax)
	}
	if err := alive(id2); err != nil {
		t.Errorf("sandbox does not answer after the thread bomb: %v", err)
	}
	if answers != nil && !errors.Is(answers, errdefs.ErrResourceExhausted) {
		t.Errorf("sandbox does not answer after the fork bomb: %v", answers)
	}
	if err := env.client.DestroySandbox(t.Context(), id); err != nil {
		t.Fatalf("destroying the bombed sandbox: %v", err)
	}
	if _, err := os.Stat(cgroupPath("pids", id)); err == nil {
		t.Errorf("destroy left the cgroup %s", cgroupPath("pids", id))
	}
}

// execOnce runs a shell command with a short timeout and returns stdout.
func execOnce(id, script string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := env.client.Exec(ctx, id, api.ExecRequest{Shell: script})
	if err != nil {
		return "", err
	}
	if res.ExitCode != 0 {
		return res.Stdout, fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
	}
	return res.Stdout, nil
}
