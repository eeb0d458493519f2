package integration

// Battery items 39-44: what the host shares with every sandbox (the global
// file table, socket memory, the pid space, conntrack, the daemon's own
// CPU on a sandbox's behalf, downloads). Each lets one sandbox take all it
// can and holds it while the host checks, from outside, that its take is
// within the bound SECURITY.md gives and that a sibling and the host
// (root and a non-root uid) still do the same thing.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// holdOrEnd starts req in id and waits (up to two minutes) for the probe
// to create /tmp/ready-<name>: it then holds what it took, and the exec's
// outcome arrives on ch when it ends. The sandbox's own limits may end
// the probe before it says so (its memory limit, reached): held is false
// then, and the host's checks run against what is left.
func holdOrEnd(t *testing.T, b *battery, id, name string, req api.ExecRequest) (ch <-chan execOutcome, held bool) {
	t.Helper()
	ch = goExec(id, req)
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := env.client.Stat(ctx, id, "/tmp/ready-"+name)
		cancel()
		if err == nil {
			return ch, true
		}
		select {
		case out := <-ch:
			evidence(t, "the sandbox ended the prober before it held its take: %v (exit %+v)", out.err, out.res)
			return nil, false
		case <-time.After(200 * time.Millisecond):
		}
	}
	t.Fatalf("the probe did not report holding its take within 2 minutes")
	return nil, false
}

// finish waits for a held exec and returns its stdout.
func finish(t *testing.T, b *battery, ch <-chan execOutcome) string {
	t.Helper()
	out := <-ch
	if out.err != nil {
		evidence(t, "the hostile exec ended with %v", out.err)
		return ""
	}
	b.noSecrets(t, out.res.Stdout, out.res.Stderr)
	return out.res.Stdout
}

// asNobody runs script under sh as uid/gid 65534 on the host.
func asNobody(script string) error {
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out)))
	}
	return nil
}

func hostField(t testing.TB, path string, i int) int64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	f := strings.Fields(string(b))
	if len(f) <= i {
		t.Fatalf("%s: %q", path, b)
	}
	n, _ := strconv.ParseInt(f[i], 10, 64)
	return n
}

func readHostString(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	return string(b)
}

// slabObjSize is the object size of a slab cache (/proc/slabinfo).
func slabObjSize(t testing.TB, name string) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/slabinfo")
	if err != nil {
		t.Fatalf("reading /proc/slabinfo: %v", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && f[0] == name {
			n, _ := strconv.ParseInt(f[3], 10, 64)
			return n
		}
	}
	t.Fatalf("/proc/slabinfo has no %s cache", name)
	return 0
}

// sandboxMemLimit is the memory limit of a sandbox's whole cgroup (its
// workload and its agent).
func sandboxMemLimit(t testing.TB, id string) int64 {
	return readHostInt(t, filepath.Join(cgroupPath("memory", id), "memory.limit_in_bytes"))
}

// siblingProbe runs the probe in the battery's shared probe sandbox and
// returns the answer of the probe named key and its last line.
func siblingProbe(t testing.TB, b *battery, key string, args ...string) string {
	t.Helper()
	got, res := b.probe(t, b.shared(t), "", args...)
	return got[key] + " " + lastLine(res.Stdout)
}

// 39: the global file table.
func itemFileTable(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: 128, Pids: 512})
	fileMax := hostField(t, "/proc/sys/fs/file-max", 0)
	memLimit := sandboxMemLimit(t, id)
	filp := slabObjSize(t, "filp")
	// Every struct file is charged to the sandbox's memory cgroup: it
	// cannot hold more than its memory limit buys.
	bound := memLimit / filp
	before := hostField(t, "/proc/sys/fs/file-nr", 0)
	peak := sample(100*time.Millisecond, func() int64 { return hostField(t, "/proc/sys/fs/file-nr", 0) })
	ch, ok := holdOrEnd(t, b, id, "holdfiles", api.ExecRequest{Cmd: []string{"/tmp/probe", "holdfiles", "100", "15"}, Env: map[string]string{"GOMAXPROCS": "1"}, TimeoutMs: 120_000})
	// Held: the host's root, a non-root uid and a sibling still open
	// files and start processes.
	f, rootErr := os.Open("/etc/hostname")
	if rootErr == nil {
		f.Close()
	}
	nobodyErr := asNobody("exec 3</etc/hostname && cat /etc/hostname >/dev/null")
	sibErr := alive(b.sib)
	sibOpen := siblingProbe(t, b, "open_until_error", "fds")
	maxHeld := peak.Stop()
	out := "holdfiles (the sandbox ended the prober at its memory limit)"
	if ok {
		out = finish(t, b, ch)
	}
	var held string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "holdfiles ") {
			held = l
		}
	}
	evidence(t, "fs.file-max %d; host file-nr %d -> peak %d (+%d; bound: memory limit %d MiB / struct file %d B = %d); sandbox: %q; meanwhile host root open: %s, uid 65534 open+exec: %s, sibling exec: %s, sibling probe fds: %s",
		fileMax, before, maxHeld, maxHeld-before, memLimit>>20, filp, bound, held, errClass(rootErr), errClass(nobodyErr), errClass(sibErr), sibOpen)
	if held == "" {
		t.Errorf("the probe did not report what it held: %q", truncate(out, 400))
	}
	if maxHeld-before > bound {
		t.Errorf("the host's open files rose by %d while one sandbox held files; its memory limit bounds it to %d", maxHeld-before, bound)
	}
	if fileMax < 1<<40 && (maxHeld-before)*4 > fileMax {
		t.Errorf("one sandbox took %d of the host's fs.file-max %d", maxHeld-before, fileMax)
	}
	for what, err := range map[string]error{"the host's root": rootErr, "uid 65534 on the host": nobodyErr, "a sibling sandbox": sibErr} {
		if err != nil {
			t.Errorf("%s could not open a file while the sandbox held its files: %v", what, err)
		}
	}
	// The sibling opens files up to its own nofile limit (EMFILE), not
	// the host's table (ENFILE).
	if !strings.HasPrefix(sibOpen, "EMFILE ") {
		t.Errorf("a sibling sandbox could not open files up to its own limit: %s", sibOpen)
	}
}

// sockstatTCPMem is the host's TCP buffer memory in pages (the "mem"
// field of /proc/net/sockstat's TCP line).
func sockstatTCPMem(t testing.TB) int64 {
	b, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		t.Fatalf("reading sockstat: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(b)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) > 0 && f[0] == "TCP:" {
			for i := 1; i+1 < len(f); i += 2 {
				if f[i] == "mem" {
					n, _ := strconv.ParseInt(f[i+1], 10, 64)
					return n
				}
			}
		}
	}
	t.Fatalf("sockstat has no TCP mem: %s", b)
	return 0
}

// hostLoopback moves n bytes over a loopback TCP connection on the host.
func hostLoopback(n int64) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	got := make(chan int64, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(60 * time.Second))
		m, _ := io.Copy(io.Discard, c)
		got <- m
	}()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 60*time.Second)
	if err != nil {
		return err
	}
	c.SetDeadline(time.Now().Add(60 * time.Second))
	_, err = io.CopyN(c, zeroReader{}, n)
	c.Close()
	if err != nil {
		return err
	}
	if m := <-got; m != n {
		return fmt.Errorf("received %d of %d bytes", m, n)
	}
	return nil
}

type zeroReader struct{}

func (zeroReader) Read(p []byte) (int, error) { clear(p); return len(p), nil }

// 40: socket buffer memory.
func itemSocketMemory(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{MemoryMB: memoryFor(b.tier, 64)})
	memLimit := sandboxMemLimit(t, id)
	page := int64(os.Getpagesize())
	var tcpLimit int64 = memLimit
	if b.tier == "container" {
		tcpLimit = readHostInt(t, filepath.Join(cgroupPath("memory", id), "memory.kmem.tcp.limit_in_bytes"))
		if tcpLimit > memLimit {
			t.Errorf("the sandbox's TCP memory limit %d is above its memory limit %d", tcpLimit, memLimit)
		}
	}
	before := sockstatTCPMem(t)
	peak := sample(100*time.Millisecond, func() int64 { return sockstatTCPMem(t) })
	// gVisor keeps socket buffers in the sandbox's own memory: filling
	// them ends the sandbox at its memory limit, before the prober can
	// say it holds them. That is the sandbox at its worst there.
	ch, held := holdOrEnd(t, b, id, "tcpfill", api.ExecRequest{Cmd: []string{"/tmp/probe", "tcpfill", "800", "10"}, TimeoutMs: 180_000})
	hostErr := hostLoopback(1 << 20)
	sib := siblingProbe(t, b, "loopback", "loopback", strconv.Itoa(1<<20))
	maxMem := peak.Stop()
	var charged string
	if b.tier == "container" {
		// The prober sits in the workload cgroup, whose limits are the
		// requested ones (the sandbox's cgroup adds the agent's reserve).
		wl := func(f string) int64 { return readHostInt(t, filepath.Join(workloadPath("memory", id), f)) }
		maxUsage, failcnt, wlLimit := wl("memory.kmem.tcp.max_usage_in_bytes"), wl("memory.kmem.tcp.failcnt"), wl("memory.kmem.tcp.limit_in_bytes")
		memFail := wl("memory.failcnt")
		charged = fmt.Sprintf("; the sandbox's TCP limit %d MiB; its workload's memory.kmem.tcp max_usage %d MiB of limit %d MiB, failcnt %d; memory.failcnt %d",
			tcpLimit>>20, maxUsage>>20, wlLimit>>20, failcnt, memFail)
		if failcnt == 0 && memFail == 0 && maxUsage < wlLimit*9/10 {
			t.Errorf("the sandbox reached neither its socket memory limit nor its memory limit (TCP max %d of %d bytes): the item tested nothing", maxUsage, wlLimit)
		}
	}
	out := "tcpfill (the sandbox ended at its memory limit) "
	if held {
		out = finish(t, b, ch)
	}
	// Other tests on the host move some TCP data meanwhile: 16 MiB of
	// slack on top of the sandbox's limit.
	bound := (tcpLimit + 16<<20) / page
	evidence(t, "sandbox: %s; host TCP mem %d -> peak %d pages (+%d MiB; bound %d MiB)%s; meanwhile 1 MiB over loopback on the host: %s, in a sibling: %s",
		lastLine(out), before, maxMem, (maxMem-before)*page>>20, bound*page>>20, charged, errClass(hostErr), sib)
	if !strings.Contains(out, "tcpfill ") {
		t.Errorf("the probe did not report: %q", truncate(out, 400))
	}
	if maxMem-before > bound {
		t.Errorf("the host's TCP memory rose by %d MiB while a sandbox with %d MiB of memory filled sockets (bound %d MiB)",
			(maxMem-before)*page>>20, memLimit>>20, bound*page>>20)
	}
	if hostErr != nil {
		t.Errorf("1 MiB over loopback on the host failed while the sandbox held its buffers: %v", hostErr)
	}
	if !strings.HasPrefix(sib, "OK ") {
		t.Errorf("1 MiB over loopback in a sibling failed: %s", sib)
	}
}

// 41: the pid space.
func itemPidSpace(t *testing.T, b *battery) {
	pidMax := hostField(t, "/proc/sys/kernel/pid_max", 0)
	if env.cfg.Limits.Pids*8 > pidMax {
		t.Errorf("limits.pids %d is more than 1/8 of kernel.pid_max %d", env.cfg.Limits.Pids, pidMax)
	}
	_, over := env.client.CreateSandbox(context.Background(), api.CreateSandboxRequest{Isolation: b.tier, Template: "busybox", Pids: env.cfg.Limits.Pids + 1})
	if !errors.Is(over, errdefs.ErrInvalidArgument) {
		t.Errorf("a create with pids above limits.pids: %v, want invalid_argument", over)
	}
	const limit = 2048
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Pids: limit})
	pid := sandboxPid(t, id)
	// The host's pids the sandbox holds: its whole pids cgroup (workload
	// and agent; under gVisor the sentry's threads, whatever runs inside).
	cg := filepath.Join(cgroupPath("pids", id))
	hostMax := strings.TrimSpace(readHostString(t, filepath.Join(cg, "pids.max")))
	peak := sample(100*time.Millisecond, func() int64 { return readHostInt(t, filepath.Join(cg, "pids.current")) })
	ch := goExec(id, api.ExecRequest{Shell: `/tmp/probe threads 4000 >/dev/null 2>&1 & /tmp/probe threads 4000 >/dev/null 2>&1 & sleep 20`, TimeoutMs: 60_000})
	// Wait until the sandbox is at its limit (bounded), then fork on the
	// host and in a sibling. Inside gVisor the count is its own.
	inside := func() int {
		dir := "/.agentbox/cgroup/pids/workload"
		switch b.tier {
		case "container":
			return nsTasks(pid, pid)
		case "microvm":
			dir = guestPidsDir // the guest kernel's
		}
		r, err := execOnce(id, "cat "+dir+"/pids.current")
		if err != nil {
			return 0
		}
		n, _ := strconv.Atoi(strings.TrimSpace(r))
		return n
	}
	deadline := time.Now().Add(90 * time.Second)
	atLimit := inside()
	for time.Now().Before(deadline) && atLimit < limit*9/10 {
		time.Sleep(200 * time.Millisecond)
		atLimit = inside()
	}
	nobodyErr := asNobody("sh -c 'true' & wait")
	rootErr := exec.Command("sh", "-c", "true & wait").Run()
	sib := execReq(t, b.sib, api.ExecRequest{Shell: "sh -c true & wait; echo forked", TimeoutMs: 30_000})
	maxHost := peak.Stop()
	<-ch
	evidence(t, "kernel.pid_max %d, limits.pids %d; sandbox with pids %d: %d tasks inside when the host checked; host pids of its cgroup peaked at %d (its pids.max %s); meanwhile fork on the host as root: %s, as uid 65534: %s, in a sibling: %q",
		pidMax, env.cfg.Limits.Pids, limit, atLimit, maxHost, hostMax, errClass(rootErr), errClass(nobodyErr), strings.TrimSpace(sib.Stdout))
	// The agent's reserve is 64 (container) or gVisor's own threads.
	if maxHost > limit+128 {
		t.Errorf("the sandbox held %d host pids (pids.max %s) with a limit of %d", maxHost, hostMax, limit)
	}
	if atLimit < limit*9/10 {
		t.Errorf("the thread bombs did not reach the limit (%d of %d): the item tested nothing", atLimit, limit)
	}
	if rootErr != nil || nobodyErr != nil || strings.TrimSpace(sib.Stdout) != "forked" {
		t.Errorf("fork failed while a sandbox was at its pids limit: root %v, uid 65534 %v, sibling %+v", rootErr, nobodyErr, sib)
	}
}

// conntrackOf counts the host's conntrack entries whose origin is addr.
// It reads init's table (the host's network namespace) rather than
// /proc/net, which follows this process's own: one run read no entries
// there while the host's count rose by the sandbox's 512 (the in-process
// daemon enters sandboxes' namespaces on locked threads; the cause was
// not pinned down).
func conntrackOf(addr string) int64 {
	f, err := os.Open("/proc/1/net/nf_conntrack")
	if err != nil {
		return -1
	}
	defer f.Close()
	var n int64
	needle := " src=" + addr + " "
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if strings.Contains(sc.Text(), needle) {
			n++
		}
	}
	return n
}

// sandboxNet returns a sandbox's address and its gateway (the /30's
// first address).
func sandboxNet(t testing.TB, id string) (addr, gw netip.Addr) {
	t.Helper()
	sb, err := env.client.GetSandbox(context.Background(), id)
	if err != nil || sb.Network == nil {
		t.Fatalf("sandbox %s: %v, network %+v", id, err, sb)
	}
	p, err := netip.ParsePrefix(sb.Network.Address)
	if err != nil {
		t.Fatalf("sandbox %s address %q: %v", id, sb.Network.Address, err)
	}
	return p.Addr(), p.Masked().Addr().Next()
}

// 42: conntrack entries, flows to the gateway's resolver included.
func itemConntrack(t *testing.T, b *battery) {
	const limit = 512
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Network: &api.Network{Egress: api.EgressCustom, MaxConnections: limit}})
	addr, gw := sandboxNet(t, id)
	if conntrackOf(addr.String()) < 0 {
		t.Fatal("/proc/1/net/nf_conntrack is missing: load nf_conntrack (scripts/install-deps.sh)")
	}
	before := hostField(t, "/proc/sys/net/netfilter/nf_conntrack_count", 0)
	peak := sample(200*time.Millisecond, func() int64 { return conntrackOf(addr.String()) })
	res := b.hostile(t, id, api.ExecRequest{Cmd: []string{"/tmp/probe", "flows", net.JoinHostPort(gw.String(), "53"), "15"}, TimeoutMs: 60_000})
	maxFlows := peak.Stop()
	after := hostField(t, "/proc/sys/net/netfilter/nf_conntrack_count", 0)
	// Meanwhile: a sibling with egress resolves through its own
	// gateway, and the host connects over loopback.
	sib := b.hostileSandbox(t, api.CreateSandboxRequest{Network: &api.Network{Egress: api.EgressCustom}})
	_, sibGw := sandboxNet(t, sib)
	sibRes := b.hostile(t, sib, api.ExecRequest{Cmd: []string{"/tmp/probe", "flows", net.JoinHostPort(sibGw.String(), "53"), "1"}, TimeoutMs: 30_000})
	hostErr := hostLoopback(1 << 10)
	// A sandbox asking for no limit still gets the host's ceiling.
	free := b.sandbox(t, api.CreateSandboxRequest{Network: &api.Network{Egress: api.EgressCustom, MaxConnections: -1}})
	ctMax := hostField(t, "/proc/sys/net/netfilter/nf_conntrack_max", 0)
	rules, _ := exec.Command("nft", "list", "chain", "inet", env.cfg.CgroupParent, "lim-"+free).CombinedOutput()
	ceiling := int64(-1)
	if _, after, ok := strings.Cut(string(rules), "ct count over "); ok {
		ceiling, _ = strconv.ParseInt(strings.Fields(after)[0], 10, 64)
	}
	evidence(t, "sandbox with max_connections %d flooding its gateway's resolver: %s; its conntrack entries peaked at %d; host nf_conntrack_count %d -> %d (max %d); a sibling's flows to its resolver: %s; host loopback connect: %s; a sandbox with no limit counts to %d",
		limit, lastLine(res.Stdout), maxFlows, before, after, ctMax, lastLine(sibRes.Stdout), errClass(hostErr), ceiling)
	if maxFlows > limit+16 {
		t.Errorf("the sandbox held %d conntrack entries; its limit is %d", maxFlows, limit)
	}
	if maxFlows < limit/2 {
		t.Errorf("the sandbox held only %d conntrack entries (limit %d): the flood did not run", maxFlows, limit)
	}
	if !strings.Contains(sibRes.Stdout, "flows OK") || strings.Contains(sibRes.Stdout, "udp=0 ") {
		t.Errorf("a sibling could not send to its resolver: %q", sibRes.Stdout)
	}
	if hostErr != nil {
		t.Errorf("the host could not connect over loopback: %v", hostErr)
	}
	if ceiling <= 0 || ceiling > max(ctMax/16, 1024) {
		t.Errorf("a sandbox with max_connections -1 counts to %d; want at most nf_conntrack_max/16 (%d): %s", ceiling, ctMax/16, rules)
	}
}

// 43: a reject flood against the daemon's firewall log.
func itemRejectFlood(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{Network: &api.Network{Egress: api.EgressCustom}})
	logged := func() int64 {
		l, err := env.client.EgressLog(context.Background(), id)
		if err != nil {
			t.Fatalf("egress log: %v", err)
		}
		n := l.Dropped
		for _, e := range l.Entries {
			if strings.HasPrefix(e.Dest, "10.255.255.1:") {
				n++
			}
		}
		return n
	}
	cpu := func() time.Duration {
		var ru unix.Rusage
		_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	const secs = 10
	logBefore, cpuBefore, start := logged(), cpu(), time.Now()
	ch := goExec(id, api.ExecRequest{Cmd: []string{"/tmp/probe", "udpflood", "10.255.255.1:9", strconv.Itoa(secs)}, TimeoutMs: 60_000})
	time.Sleep(secs / 2 * time.Second)
	sibStart := time.Now()
	sibErr := alive(b.sib)
	sibTook := time.Since(sibStart)
	out := <-ch
	wall, used := time.Since(start), cpu()-cpuBefore
	if out.err != nil {
		t.Fatalf("the flood's exec: %v", out.err)
	}
	n := logged() - logBefore
	// The firewall logs at most 20 a second for one sandbox, its bucket
	// holding a second's worth and a burst of 40 (internal/network/nflog.go).
	bound := int64(wall.Seconds()*20) + 20 + 40
	evidence(t, "sandbox flooded a blocked address for %ds: %s; the daemon logged %d of its packets (bound %d in %.1fs); this process (the daemon, in-process) used %.2fs of CPU in %.1fs; a sibling's exec meanwhile: %s in %v",
		secs, lastLine(out.res.Stdout), n, bound, wall.Seconds(), used.Seconds(), wall.Seconds(), errClass(sibErr), sibTook.Round(time.Millisecond))
	if n > bound {
		t.Errorf("the daemon logged %d rejected packets of one sandbox in %.1fs; the rate allows %d", n, wall.Seconds(), bound)
	}
	if n == 0 {
		t.Errorf("nothing logged: the flood did not reach the firewall (%q)", out.res.Stdout)
	}
	if used > wall/2 {
		t.Errorf("the daemon's process used %.2fs of CPU in %.1fs of a reject flood", used.Seconds(), wall.Seconds())
	}
	if sibErr != nil {
		t.Errorf("a sibling did not answer during the flood: %v", sibErr)
	}
}

// 44: a sparse terabyte downloaded by the host.
func itemSparseDownload(t *testing.T, b *battery) {
	const diskMB = 256
	id := b.hostileSandbox(t, api.CreateSandboxRequest{DiskMB: diskMB})
	b.hostile(t, id, api.ExecRequest{Shell: "mkdir -p /root/d && /tmp/probe sparse /root/d/tera 1099511627776 && /tmp/probe sparse /root/small 8388608"})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var got int64
	rc, fileErr := env.client.ReadFile(ctx, id, "/root/d/tera")
	if fileErr == nil {
		got, fileErr = io.Copy(io.Discard, rc)
		rc.Close()
	}
	var gotTar int64
	ar, tarErr := env.client.DownloadArchive(ctx, id, "/root")
	if tarErr == nil {
		gotTar, tarErr = io.Copy(io.Discard, ar)
		ar.Close()
	}
	var small int64
	sr, smallErr := env.client.ReadFile(ctx, id, "/root/small")
	if smallErr == nil {
		small, smallErr = io.Copy(io.Discard, sr)
		sr.Close()
	}
	sibRes := siblingDownload(t, b)
	evidence(t, "disk limit %d MiB; the sparse 1 TiB file: %d bytes, %v; an archive holding it: %d bytes, %v; an 8 MiB sparse file: %d bytes, %v; a sibling's download: %s",
		diskMB, got, fileErr, gotTar, tarErr, small, smallErr, sibRes)
	limit := int64(diskMB) << 20
	if got > limit || gotTar > limit {
		t.Errorf("the host received %d and %d bytes from a sandbox with a %d-byte disk limit", got, gotTar, limit)
	}
	for what, err := range map[string]error{"file": fileErr, "archive": tarErr} {
		if !errors.Is(err, errdefs.ErrResourceExhausted) || !strings.Contains(err.Error(), "download limit") {
			t.Errorf("downloading the sparse terabyte as a %s: %v; want resource_exhausted naming the download limit", what, err)
		}
	}
	if smallErr != nil || small != 8<<20 {
		t.Errorf("an 8 MiB file under the limit: %d bytes, %v", small, smallErr)
	}
	if !strings.HasPrefix(sibRes, "ok") {
		t.Errorf("a sibling's download failed: %s", sibRes)
	}
}

func siblingDownload(t testing.TB, b *battery) string {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rc, err := env.client.ReadFile(ctx, b.sib, b.sibFlag)
	if err != nil {
		return err.Error()
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil || string(got) != b.sibSecret {
		return fmt.Sprintf("%d bytes, %v", len(got), err)
	}
	return "ok"
}

// 45: per-user kernel counts (inotify instances, message queues, queued
// signals, pipe pages).
func itemPerUserCounts(t *testing.T, b *battery) {
	id := b.hostileSandbox(t, api.CreateSandboxRequest{})
	ch, held := holdOrEnd(t, b, id, "peruser", api.ExecRequest{Cmd: []string{"/tmp/probe", "peruser", "20"}, TimeoutMs: 120_000})
	if !held {
		t.Fatal("the prober ended before it held its take")
	}
	_ = os.Chmod(filepath.Dir(probePath), 0o755) // for uid 65534
	hostRoot, rootErr := exec.Command(probePath, "peruser", "check").CombinedOutput()
	nobody := exec.Command(probePath, "peruser", "check")
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	hostNobody, nobodyErr := nobody.CombinedOutput()
	sibGot, sibRes := b.probe(t, b.shared(t), "", "peruser", "check")
	out := finish(t, b, ch)
	took := map[string]int{}
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 3 {
			took[f[0]], _ = strconv.Atoi(f[2])
		}
	}
	oneLine := func(b []byte) string { return strings.Join(strings.Fields(string(b)), " ") }
	evidence(t, "the sandbox took inotify %d, mqueue %d, sigqueue %d, pipes %d, epoll watches %d; meanwhile the host's root: %s; uid 65534: %s; a sibling: %s",
		took["inotify"], took["mqueue"], took["sigqueue"], took["pipes"], took["epoll"], oneLine(hostRoot), oneLine(hostNobody), oneLine([]byte(sibRes.Stdout)))
	if rootErr != nil || nobodyErr != nil {
		t.Errorf("the host's probes failed to run: root %v, uid 65534 %v", rootErr, nobodyErr)
	}
	for _, k := range []string{"inotify", "mqueue", "sigqueue", "pipes", "epoll"} {
		for who, o := range map[string]string{"the host's root": string(hostRoot), "uid 65534 on the host": string(hostNobody)} {
			if !strings.Contains(o, k+" OK ") {
				t.Errorf("%s could not take one %s while a sandbox held all it could: %s", who, k, o)
			}
		}
		if sibGot[k] != "OK" {
			t.Errorf("a sibling sandbox could not take one %s: %s", k, sibRes.Stdout)
		}
	}
	if b.tier == "container" {
		// The limits of the sandbox's user namespace and rlimits
		// (internal/guest/boot/ucounts_linux.go), for its one uid.
		if took["inotify"] > 128 || took["sigqueue"] > 4096 || took["mqueue"] > 1 {
			t.Errorf("one uid of a sandbox took inotify %d (limit 128), sigqueue %d (4096), mqueue %d (102400 bytes: one queue)",
				took["inotify"], took["sigqueue"], took["mqueue"])
		}
		perUserOwners(t, b)
	}
}

// perUserOwners: more sandboxes than the host's root's own message queue
// count would hold each take their full share at once (12 x 102,400
// bytes against root's RLIMIT_MSGQUEUE of 819,200). The kernel charges a
// namespace's take one level up to its owner: each sandbox's own root
// uid (launcher.StartOwned), so every one gets its queue and the host's
// root still gets one. Were the namespaces root's, the ninth sandbox on
// would be refused, and so would root.
func perUserOwners(t *testing.T, b *battery) {
	const n = 12
	ids := make([]string, n)
	chs := make([]<-chan execOutcome, n)
	for i := range ids {
		ids[i] = b.hostileSandbox(t, api.CreateSandboxRequest{})
	}
	for i, id := range ids {
		var held bool
		if chs[i], held = holdOrEnd(t, b, id, "mqsig", api.ExecRequest{Cmd: []string{"/tmp/probe", "mqsig", "30"}, TimeoutMs: 90_000}); !held {
			t.Fatalf("sandbox %d of %d ended before it held its queues", i+1, n)
		}
	}
	hostRoot, err := exec.Command(probePath, "peruser", "check").CombinedOutput()
	got := make([]string, n)
	for i, ch := range chs {
		got[i] = strings.Join(strings.Fields(finish(t, b, ch)), " ")
	}
	evidence(t, "%d sandboxes at once took message queues: %q; meanwhile the host's root: %s", n, got, strings.Join(strings.Fields(string(hostRoot)), " "))
	for i, g := range got {
		if f := strings.Fields(g); len(f) < 3 || f[0] != "mqueue" || f[2] != "1" {
			t.Errorf("sandbox %d of %d took %q, want its one queue (its own uid's RLIMIT_MSGQUEUE)", i+1, n, g)
		}
	}
	if err != nil || !strings.Contains(string(hostRoot), "mqueue OK ") {
		t.Errorf("the host's root could not open a message queue while %d sandboxes held theirs: %v %s", n, err, hostRoot)
	}
}
