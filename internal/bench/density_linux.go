package bench

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// cgroupVersion is "v1" when the memory controller has a v1 hierarchy,
// else "v2".
func cgroupVersion() string {
	if _, err := os.Stat("/sys/fs/cgroup/memory/memory.usage_in_bytes"); err == nil {
		return "v1"
	}
	return "v2"
}

// memCgroupDir is the memory cgroup of sandbox id.
func memCgroupDir(version, parent, id string) string {
	if version == "v1" {
		return filepath.Join("/sys/fs/cgroup/memory", parent, id)
	}
	return filepath.Join("/sys/fs/cgroup", parent, id)
}

// cgroupMemory is one sandbox cgroup's charge, children included.
type cgroupMemory struct {
	usage, rss, cache, kmem int64
}

func readCgroupMemory(version, dir string) (cgroupMemory, error) {
	var m cgroupMemory
	stat, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return m, err
	}
	kv := parseKV(string(stat))
	if version == "v1" {
		if m.usage, err = readInt(filepath.Join(dir, "memory.usage_in_bytes")); err != nil {
			return m, err
		}
		// The total_ fields include the child cgroups (the workload).
		m.rss = kv["total_rss"]
		m.cache = kv["total_cache"]
		m.kmem, _ = readInt(filepath.Join(dir, "memory.kmem.usage_in_bytes"))
		return m, nil
	}
	if m.usage, err = readInt(filepath.Join(dir, "memory.current")); err != nil {
		return m, err
	}
	m.rss = kv["anon"]
	m.cache = kv["file"]
	m.kmem = kv["kernel"]
	return m, nil
}

// cgroupPids lists the processes in dir and its descendants.
func cgroupPids(dir string) []int {
	var pids []int
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(filepath.Join(p, "cgroup.procs"))
		if err != nil {
			return nil
		}
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				pids = append(pids, pid)
			}
		}
		return nil
	})
	return pids
}

// pss is a process's proportional set size in bytes.
func pss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0
	}
	return meminfoBytes(string(b), "Pss")
}

// rss is a process's resident set size in bytes.
func rss(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	return meminfoBytes(string(b), "VmRSS")
}

// meminfoBytes reads a "Key:   123 kB" line of /proc/meminfo, status or
// smaps_rollup.
func meminfoBytes(text, key string) int64 {
	for _, line := range strings.Split(text, "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.TrimSpace(k) != key {
			continue
		}
		f := strings.Fields(v)
		if len(f) == 0 {
			return 0
		}
		n, _ := strconv.ParseInt(f[0], 10, 64)
		if len(f) > 1 && f[1] == "kB" {
			n <<= 10
		}
		return n
	}
	return 0
}

func parseKV(text string) map[string]int64 {
	m := map[string]int64{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 2 {
			if n, err := strconv.ParseInt(f[1], 10, 64); err == nil {
				m[f[0]] = n
			}
		}
	}
	return m
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// daemonPID finds the daemon: the option, else the pid file scripts/daemon.sh
// writes, else the one `agentbox serve` process on this host.
func (r *runner) daemonPID() int {
	if r.opts.DaemonPID > 0 {
		return r.opts.DaemonPID
	}
	if b, err := os.ReadFile("/run/agentbox/agentbox.pid"); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
				return pid
			}
		}
	}
	ents, _ := os.ReadDir("/proc")
	found := 0
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) >= 2 && (filepath.Base(args[0]) == "agentboxd" || filepath.Base(args[0]) == "agentbox") && args[1] == "serve" {
			if found != 0 {
				return 0 // more than one daemon: cannot tell which
			}
			found = pid
		}
	}
	return found
}

// density holds opts.Density idle sandboxes at once and measures what
// they cost the host.
func (r *runner) density(ctx context.Context) {
	if !r.want("density") {
		return
	}
	t := r.templates[0]
	d := &Density{Sandboxes: r.opts.Density, Template: t, Cgroup: cgroupVersion()}
	d.DaemonPID = r.daemonPID()
	if d.DaemonPID > 0 {
		d.DaemonRSSBefore = rss(d.DaemonPID)
	} else {
		r.note("density: the daemon's pid is unknown (pass --daemon-pid): its memory is left out")
	}

	// Create with a few clients at once, as a busy host would.
	ids := make([]string, r.opts.Density)
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := 0
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= len(ids) {
					return
				}
				sb, err := r.c.CreateSandbox(ctx, createReq(t))
				if err != nil {
					mu.Lock()
					d.CreateErrors++
					mu.Unlock()
					r.opts.Log.Warn("density create failed", "err", err)
					continue
				}
				ids[i] = sb.ID
			}
		}()
	}
	wg.Wait()
	defer func() {
		for _, id := range ids {
			if id != "" {
				_ = r.destroy(ctx, id)
			}
		}
	}()
	// Let them settle into idleness.
	select {
	case <-ctx.Done():
		return
	case <-time.After(2 * time.Second):
	}

	var sum cgroupMemory
	var pssSum int64
	n := 0
	for _, id := range ids {
		if id == "" {
			continue
		}
		dir := memCgroupDir(d.Cgroup, r.opts.CgroupParent, id)
		m, err := readCgroupMemory(d.Cgroup, dir)
		if err != nil {
			d.UnreadableCgroups++
			r.opts.Log.Warn("reading a sandbox's memory cgroup", "dir", dir, "err", err)
			continue
		}
		n++
		sum.usage += m.usage
		sum.rss += m.rss
		sum.cache += m.cache
		sum.kmem += m.kmem
		for _, pid := range cgroupPids(dir) {
			d.Processes++
			pssSum += pss(pid)
		}
	}
	if d.DaemonPID > 0 {
		d.DaemonRSSAfter = rss(d.DaemonPID)
	}
	if n == 0 {
		r.note("density: no sandbox cgroup could be read under %s (is --cgroup-parent right?)", memCgroupDir(d.Cgroup, r.opts.CgroupParent, ""))
		r.report.Density = d
		return
	}
	d.Sandboxes = n
	d.UsagePer = sum.usage / int64(n)
	d.RSSPer = sum.rss / int64(n)
	d.CachePer = sum.cache / int64(n)
	d.KmemPer = sum.kmem / int64(n)
	d.PSSPer = pssSum / int64(n)
	if d.DaemonPID > 0 {
		d.DaemonGrowthPer = max(d.DaemonRSSAfter-d.DaemonRSSBefore, 0) / int64(n)
	}
	// Page cache shared between sandboxes (the guest binary) is charged to
	// one cgroup only, so the PSS can exceed the usage: take the larger.
	d.HostPer = max(d.UsagePer, d.PSSPer) + d.DaemonGrowthPer
	r.report.Density = d
	if r.opts.Progress != nil {
		r.opts.Progress.Write([]byte("bench: density: " + strconv.Itoa(n) + " sandboxes, " + mib(d.HostPer) + " host memory each (cgroup " + mib(d.UsagePer) + ", PSS " + mib(d.PSSPer) + ")\n"))
	}
}
