package integration

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
)

// pools returns the daemon's pools, failing the test on error.
func pools(t *testing.T) []api.PoolStatus {
	t.Helper()
	ps, err := env.client.Pools(context.Background())
	if err != nil {
		t.Fatalf("pools: %v", err)
	}
	return ps
}

// waitPoolsFull waits until every pool has its size ready.
func waitPoolsFull(t *testing.T) []api.PoolStatus {
	t.Helper()
	deadline := time.Now().Add(90 * time.Second)
	for {
		ps := pools(t)
		full := true
		for _, p := range ps {
			full = full && p.Ready == p.Size
		}
		if full {
			return ps
		}
		if time.Now().After(deadline) {
			t.Fatalf("pools not refilled after 90 s: %+v", ps)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sandboxCgroups lists the sandbox cgroups under this daemon's parent
// (pids hierarchy on v1, the unified one on v2).
func sandboxCgroups(t *testing.T) []string {
	t.Helper()
	dir := filepath.Join("/sys/fs/cgroup/pids", env.cfg.CgroupParent)
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err == nil {
		dir = filepath.Join("/sys/fs/cgroup", env.cfg.CgroupParent)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	inits := map[string]bool{}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		// The container tier's waiting inits (driver.PrespawnCgroupPrefix
		// and the driver's own random part): the running daemon's only,
		// one prefix; its start-up cleanup removes an earlier one's.
		if rest, ok := strings.CutPrefix(e.Name(), driver.PrespawnCgroupPrefix); ok {
			prefix, _, _ := strings.Cut(rest, "-")
			inits[prefix] = true
			continue
		}
		out = append(out, e.Name())
	}
	if len(inits) > 1 {
		t.Errorf("waiting inits' cgroups of %d daemons under the parent (%v): an earlier daemon's were not cleaned up", len(inits), inits)
	}
	return out
}

func cgroupValue(t *testing.T, ctrl, id, file string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup", ctrl, env.cfg.CgroupParent, id, "workload", file))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// TestWarmPool: creates that match a pool are served from it and are
// indistinguishable from cold ones (fresh files, own id and hostname,
// the request's limits and egress); the pool refills; quotas hold; and
// nothing of the pool outlives the daemon.
func TestWarmPool(t *testing.T) {
	ctx := context.Background()
	// A template of this test's own, which step 7 removes.
	own := "poolrm-" + randHex(3)
	if _, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: own, Rootfs: "/var/lib/agentbox/build/busybox",
		User: "root", Workdir: "/root"}); err != nil {
		t.Fatal(err)
	}
	restartDaemon(t, func() {
		env.cfg.Pools = []config.WarmPool{
			{Template: "busybox", Size: 2},
			{Template: "busybox", Size: 1, Egress: "internet", MemoryMB: 256},
			{Template: own, Size: 1},
		}
	})
	t.Cleanup(func() {
		restartDaemon(t, func() { env.cfg.Pools = nil })
		// Every cgroup left under the parent belongs to a sandbox the
		// store knows as live: the pool's were destroyed at shutdown.
		list, err := env.client.ListSandboxes(ctx, clientListAll())
		if err != nil {
			t.Fatal(err)
		}
		var live []string
		for _, sb := range list {
			live = append(live, sb.ID)
		}
		for _, cg := range sandboxCgroups(t) {
			if !slices.Contains(live, cg) {
				t.Errorf("cgroup %s outlived the warm pool (live sandboxes: %v)", cg, live)
			}
		}
		if veths, chains := countNet(t); veths > len(live) || chains > len(live) {
			t.Errorf("%d veths and %d chains with %d live sandboxes: the pool's network leaked", veths, chains, len(live))
		}
		if ps := pools(t); len(ps) != 0 {
			t.Errorf("pools after restart without [[pool]]: %+v", ps)
		}
	})
	ps := waitPoolsFull(t)
	if len(ps) != 3 || ps[0].Template != "busybox" || ps[0].Isolation != "container" || ps[0].Egress != "none" ||
		ps[0].Resources.MemoryMB != env.cfg.Defaults.MemoryMB || ps[1].Egress != "internet" || ps[1].Resources.MemoryMB != 256 {
		t.Fatalf("pools = %+v", ps)
	}
	// Every pool sandbox runs, with a cgroup of its own, before any create.
	if n := len(sandboxCgroups(t)); n < 4 {
		t.Fatalf("%d sandbox cgroups with 4 pool sandboxes ready", n)
	}

	served := func(i int) int64 { return pools(t)[i].Served }
	// 1. A plain create is served from the first pool, fast.
	t0 := time.Now()
	a := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Metadata: map[string]string{"k": "v"}, TTLSeconds: 600})
	took := time.Since(t0)
	if served(0) != 1 {
		t.Fatalf("served = %d after one matching create, want 1", served(0))
	}
	t.Logf("create from the pool took %v", took)
	if got := mustSh(t, a, "hostname"); got != "sbx-"+a {
		t.Errorf("hostname %q, want sbx-%s", got, a)
	}
	sbA, err := env.client.GetSandbox(ctx, a)
	if err != nil || sbA.State != api.StateRunning || sbA.Metadata["k"] != "v" || sbA.ExpiresAt == nil ||
		time.Until(*sbA.ExpiresAt) < 9*time.Minute {
		t.Fatalf("sandbox from the pool: %+v, %v", sbA, err)
	}
	mustSh(t, a, "echo mine > /tmp/owner")

	// 2. The next one is another sandbox with fresh files.
	b := newSandbox(t, api.CreateSandboxRequest{Template: "busybox"})
	if served(0) != 2 || b == a {
		t.Fatalf("second create: served %d, ids %s %s", served(0), a, b)
	}
	if res := sh(t, b, "cat /tmp/owner"); res.ExitCode == 0 {
		t.Errorf("a pool sandbox saw another's file: %q", res.Stdout)
	}

	// 3. The pool refills in the background.
	waitPoolsFull(t)

	// 4. Different cpu, memory and pids are set on the pool sandbox's
	// cgroups; another disk size is not a pool matter (served cold).
	c := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", MemoryMB: 300, Pids: 100})
	if served(0) != 3 {
		t.Fatalf("create with other limits not served from the pool (served %d)", served(0))
	}
	if got := cgroupValue(t, "pids", c, "pids.max"); got != "100" {
		t.Errorf("pids.max of a pool sandbox given pids 100: %s", got)
	}
	if got := cgroupValue(t, "memory", c, "memory.limit_in_bytes"); got != fmt.Sprint(300<<20) {
		t.Errorf("memory limit of a pool sandbox given 300 MB: %s", got)
	}
	// env is given to the pool sandbox's agent: execs see it over the
	// template's.
	waitPoolsFull(t)
	withEnv := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Env: map[string]string{"X": "1", "PATH": "/bin:/usr/bin"}})
	if served(0) != 4 {
		t.Errorf("a create with env was not served from the pool (served %d)", served(0))
	}
	if got := mustSh(t, withEnv, `echo "$X $PATH"`); got != "1 /bin:/usr/bin" {
		t.Errorf("env of a pool sandbox created with env: %q", got)
	}
	if sb, _ := env.client.GetSandbox(ctx, withEnv); sb == nil || sb.Env["X"] != "1" {
		t.Errorf("the record lost the env: %+v", sb)
	}
	newSandbox(t, api.CreateSandboxRequest{Template: "busybox", DiskMB: 512})
	if served(0) != 4 {
		t.Errorf("a create with another disk size was served from the pool (served %d)", served(0))
	}

	// 5. Egress custom is served from the internet pool with its own
	// address and rules: the allowed host answers, another does not.
	ti := newTestInternet(t)
	e := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Network: &api.Network{
		Egress: api.EgressCustom, Allow: []string{ti.pub + "/32"}}})
	if served(1) != 1 {
		t.Fatalf("egress custom not served from the internet pool: %+v", pools(t))
	}
	sbE, _ := env.client.GetSandbox(ctx, e)
	if sbE.Network == nil || sbE.Network.Address == "" || sbE.Resources.MemoryMB != env.cfg.Defaults.MemoryMB {
		t.Fatalf("sandbox from the internet pool: %+v", sbE)
	}
	addr := strings.Split(sbE.Network.Address, "/")[0]
	if got := mustSh(t, e, "ip -4 addr show eth0"); !strings.Contains(got, addr+"/") {
		t.Errorf("eth0 in the sandbox: %q, want %s", got, addr)
	}
	get := func(host string) *api.ExecResult {
		return sh(t, e, `printf 'GET / HTTP/1.0\r\n\r\n' | nc -w 5 `+host+` 8080`)
	}
	if res := get(ti.pub); !strings.Contains(res.Stdout, "hello from") {
		t.Errorf("allowed host: exit %d, %q, %q", res.ExitCode, res.Stdout, res.Stderr)
	}
	if res := get(ti.pub2); strings.Contains(res.Stdout, "hello from") {
		t.Errorf("a host the custom policy does not allow answered: %q", res.Stdout)
	}

	// 6. Tenant quotas apply to creates served from the pool, and a
	// refused create leaves the pool sandbox for the next request.
	waitPoolsFull(t)
	_, tc, _ := tenantKey(t, "pool", &api.Quotas{Sandboxes: 1})
	if _, err := tc.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"}); err != nil {
		t.Fatal(err)
	}
	before := waitPoolsFull(t)[0]
	if _, err := tc.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"}); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("create over quota from the pool = %v, want resource_exhausted", err)
	}
	if after := pools(t)[0]; after.Served != before.Served || after.Ready != before.Ready {
		t.Errorf("a refused create took a pool sandbox: before %+v, after %+v", before, after)
	}
	// Concurrent creates served from the pool cannot both take the last
	// slot: the record is written once, running, and the quota counts it
	// from then on, the reservation until then.
	_, tc2, _ := tenantKey(t, "poolrace", &api.Quotas{Sandboxes: 1})
	var (
		wg       sync.WaitGroup
		okN, nok atomic.Int32
	)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sb, err := tc2.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox"})
			switch {
			case err == nil:
				okN.Add(1)
				if sb.State != api.StateRunning || sb.Pid == 0 {
					t.Errorf("a create from the pool answered %+v, want running with its pid", sb)
				}
			case errors.Is(err, errdefs.ErrResourceExhausted):
				nok.Add(1)
			default:
				t.Errorf("concurrent create from the pool: %v", err)
			}
		}()
	}
	wg.Wait()
	if okN.Load() != 1 || nok.Load() != 3 {
		t.Errorf("4 concurrent creates from the pool with 1 slot: %d created, %d refused", okN.Load(), nok.Load())
	}

	// 7. A template whose only users are pool sandboxes can be removed:
	// they go with it, and the pool says why it stays empty.
	if err := env.client.RemoveTemplate(ctx, own); err != nil {
		t.Fatalf("removing a template only a pool uses: %v", err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		p := pools(t)[2]
		if p.Ready == 0 && strings.Contains(p.LastError, "not found") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool of a removed template: %+v", p)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestWarmPoolCode: a pool with code = "python" serves creates whose
// first cell runs in a kernel started while the sandbox waited (the
// context is the default one, with no restart), and the create's env
// reaches that kernel.
func TestWarmPoolCode(t *testing.T) {
	needPython(t)
	ctx := context.Background()
	restartDaemon(t, func() {
		env.cfg.Pools = []config.WarmPool{{Template: "python", Size: 1, Code: "python", MemoryMB: 1024}}
	})
	t.Cleanup(func() { restartDaemon(t, func() { env.cfg.Pools = nil }) })
	ps := waitPoolsFull(t)
	if len(ps) != 1 || ps[0].Code != "python" {
		t.Fatalf("pools = %+v, want one with code python", ps)
	}
	t0 := time.Now()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "python", MemoryMB: 1024, Env: map[string]string{"POOL_GREETING": "hello from the request"}})
	created := time.Since(t0)
	if got := pools(t)[0].Served; got != 1 {
		t.Fatalf("served = %d, want the create served from the pool", got)
	}
	ex := runCode(t, id, api.RunCodeRequest{Code: "import os; os.environ.get('POOL_GREETING')"})
	first := time.Since(t0)
	if got := mainText(ex); got != "'hello from the request'" {
		t.Errorf("the pool's kernel sees POOL_GREETING = %s, want the request's", got)
	}
	cc, err := env.client.ListCodeContexts(ctx, id)
	if err != nil || len(cc) != 1 || cc[0].ID != "python" || cc[0].Restarts != 0 || cc[0].ExecutionCount != 1 {
		t.Fatalf("contexts = %+v, %v; want the default python context, its kernel not restarted, one run", cc, err)
	}
	if !cc[0].StartedAt.Before(t0) {
		t.Errorf("the kernel started at %v, after the create at %v: it was not the pool's", cc[0].StartedAt, t0)
	}
	// A process the kernel starts inherits the variable too.
	ex = runCode(t, id, api.RunCodeRequest{Code: "import subprocess; subprocess.run(['sh', '-c', 'echo $POOL_GREETING'], capture_output=True, text=True).stdout"})
	if got := mainText(ex); got != "'hello from the request\\n'" {
		t.Errorf("a child of the kernel sees %s", got)
	}
	t.Logf("create from the code pool %v, to the first cell's result %v", created, first)
}

// TestWarmPoolDesktop: a pool with desktop = true serves desktop sandboxes
// whose display is running when the create returns: the start is a no-op
// and a screenshot answers at once (issue 18: ready under 100 ms from a
// pool).
func TestWarmPoolDesktop(t *testing.T) {
	needDesktopTemplate(t)
	ctx := context.Background()
	restartDaemon(t, func() {
		env.cfg.Pools = []config.WarmPool{{Template: "desktop", Size: 1, Desktop: true, MemoryMB: 2048}}
	})
	t.Cleanup(func() { restartDaemon(t, func() { env.cfg.Pools = nil }) })
	ps := waitPoolsFull(t)
	if len(ps) != 1 || !ps[0].Desktop {
		t.Fatalf("pools = %+v, want one with desktop", ps)
	}
	t0 := time.Now()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "desktop"}) // the template's 2 GiB: the pool's
	d := env.client.Desktop(id)
	st, err := d.Start(ctx, api.StartDesktopRequest{})
	ready := time.Since(t0)
	if err != nil || st.State != api.DesktopRunning {
		t.Fatalf("start on a pool sandbox: %+v, %v", st, err)
	}
	if got := pools(t)[0].Served; got != 1 {
		t.Fatalf("served = %d, want the create served from the pool", got)
	}
	if st.StartedAt == nil || !st.StartedAt.Before(t0) {
		t.Errorf("the display started at %v, not before the create at %v: not the pool's", st.StartedAt, t0)
	}
	shot, err := d.Screenshot(ctx, api.ScreenshotOptions{})
	if err != nil || shot.Width != 1024 || shot.Height != 768 {
		t.Fatalf("screenshot: %+v, %v", shot, err)
	}
	t.Logf("create from the desktop pool to a running desktop: %v", ready)
}
