package posture

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// fakeProc builds a /proc and cgroup tree with one process per entry.
type fakeProcess struct {
	pid    int
	status string
	ns     string // namespace link target prefix
	uidMap string
	cgroup string
	fds    int
	mounts string // mountinfo
}

const cleanMounts = "40 39 0:50 / / rw - overlay overlay rw,lowerdir=/proc/self/fd/7,upperdir=/proc/self/fd/8,workdir=/proc/self/fd/9,userxattr\n" +
	"41 40 0:51 / /proc rw,nosuid,nodev,noexec - proc proc rw\n"

const goodStatus = "Name:\tsleep\nUid:\t1000000\t1000000\t1000000\t1000000\nGid:\t1000000\t1000000\t1000000\t1000000\n" +
	"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n" +
	"NoNewPrivs:\t1\nSeccomp:\t2\n"

func build(t *testing.T, procs []fakeProcess) Options {
	t.Helper()
	root := t.TempDir()
	o := Options{ProcRoot: filepath.Join(root, "proc"), CgroupRoot: filepath.Join(root, "cg"), CgroupParent: "agentbox", UIDBase: 1000000, UIDCount: 65536,
		ownerOf: func(string) (string, error) { return "1000000", nil }}
	mk := func(dir string, files map[string]string) {
		os.MkdirAll(dir, 0o755)
		for n, c := range files {
			os.WriteFile(filepath.Join(dir, n), []byte(c), 0o644)
		}
	}
	self := filepath.Join(o.ProcRoot, "self", "ns")
	os.MkdirAll(self, 0o755)
	for _, ns := range namespaces {
		os.Symlink(ns+":[host]", filepath.Join(self, ns))
	}
	var list string
	for _, p := range procs {
		dir := filepath.Join(o.ProcRoot, strconv.Itoa(p.pid))
		mk(dir, map[string]string{"status": p.status, "uid_map": p.uidMap, "cgroup": p.cgroup, "mountinfo": p.mounts})
		os.MkdirAll(filepath.Join(dir, "ns"), 0o755)
		for _, ns := range namespaces {
			os.Symlink(ns+":["+p.ns+"]", filepath.Join(dir, "ns", ns))
		}
		os.MkdirAll(filepath.Join(dir, "fd"), 0o755)
		for i := 0; i < p.fds; i++ {
			os.WriteFile(filepath.Join(dir, "fd", strconv.Itoa(i)), nil, 0o644)
		}
		list += strconv.Itoa(p.pid) + "\n"
	}
	mk(filepath.Join(o.CgroupRoot, "pids", "agentbox", "sb1"), map[string]string{"cgroup.procs": list})
	return o
}

func TestCheck(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	good := fakeProcess{pid: 10, status: goodStatus, ns: "sb", uidMap: "         0    1000000      65536\n", cgroup: cg, fds: 3}
	tests := []struct {
		name    string
		mutate  func(p *fakeProcess)
		failing string
	}{
		{"good", func(*fakeProcess) {}, ""},
		{"no seccomp", func(p *fakeProcess) { p.status = replace(p.status, "Seccomp:\t2", "Seccomp:\t0") }, "Seccomp"},
		{"new privs allowed", func(p *fakeProcess) { p.status = replace(p.status, "NoNewPrivs:\t1", "NoNewPrivs:\t0") }, "NoNewPrivs"},
		{"capabilities", func(p *fakeProcess) {
			p.status = replace(p.status, "CapEff:\t0000000000000000", "CapEff:\t000001ffffffffff")
		}, "CapEff"},
		{"host namespaces", func(p *fakeProcess) { p.ns = "host" }, "cgroup namespace"},
		{"host root", func(p *fakeProcess) { p.status = replace(p.status, "Uid:\t1000000", "Uid:\t0") }, "host uids/gids"},
		{"identity map", func(p *fakeProcess) { p.uidMap = "0 0 4294967295" }, "uid_map"},
		{"wrong cgroup", func(p *fakeProcess) { p.cgroup = "4:memory:/\n3:pids:/agentbox/sb1\n" }, "memory cgroup"},
		{"leaked fd", func(p *fakeProcess) { p.fds = 4 }, "open fds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.mutate(&p)
			o := build(t, []fakeProcess{{pid: 1, status: goodStatus, ns: "sb", uidMap: good.uidMap, cgroup: cg, fds: 9, mounts: cleanMounts}, p})
			rep := Check("sb1", 1, o)
			if len(rep.Processes) != 2 {
				t.Fatalf("checked %d processes, want 2", len(rep.Processes))
			}
			if !rep.Processes[0].Pass {
				t.Errorf("init failed: %+v", rep.Processes[0].Checks)
			}
			var failed []string
			for _, c := range rep.Processes[1].Checks {
				if !c.Pass {
					failed = append(failed, c.Name)
				}
			}
			if tt.failing == "" {
				if !rep.Pass || len(failed) > 0 {
					t.Errorf("good process failed %v", failed)
				}
				return
			}
			if rep.Pass || len(failed) == 0 || failed[0] != tt.failing {
				t.Errorf("failed checks %v, want first %q; report pass %v", failed, tt.failing, rep.Pass)
			}
		})
	}
}

func TestCheckNoProcesses(t *testing.T) {
	o := build(t, nil)
	if rep := Check("sb1", 1, o); rep.Pass {
		t.Error("a sandbox without processes passed")
	}
}

func replace(s, old, new string) string {
	if !strings.Contains(s, old) {
		panic("no " + old)
	}
	return strings.Replace(s, old, new, 1)
}

// TestCheckMountinfo: the init's mount table (what every process of the
// sandbox sees) must name no host path.
func TestCheckMountinfo(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	leaky := "40 39 0:50 / / rw - overlay overlay rw,lowerdir=/var/lib/agentbox/storage/templates/base/1/rootfs,upperdir=/proc/self/fd/8\n"
	for _, c := range []struct {
		mounts string
		pass   bool
	}{{cleanMounts, true}, {leaky, false}} {
		o := build(t, []fakeProcess{{pid: 1, status: goodStatus, ns: "sb", uidMap: "0 1000000 65536", cgroup: cg, fds: 9, mounts: c.mounts}})
		o.HostPaths = []string{"/var/lib/agentbox"}
		rep := Check("sb1", 1, o)
		var got *api.CheckValue
		for i, v := range rep.Processes[0].Checks {
			if v.Name == "mountinfo hides the host" {
				got = &rep.Processes[0].Checks[i]
			}
		}
		if got == nil || got.Pass != c.pass || rep.Pass != c.pass {
			t.Errorf("mounts %q: check %+v, report pass %v; want pass %v", c.mounts, got, rep.Pass, c.pass)
		}
	}
}

// TestCheckOwnerAndRange: a user namespace the host's root owns, and a
// sandbox in the range every sandbox shares (or found beside another),
// fail their checks.
func TestCheckOwnerAndRange(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	p := fakeProcess{pid: 1, status: goodStatus, ns: "sb", uidMap: "0 1000000 65536", cgroup: cg, fds: 9, mounts: cleanMounts}
	for _, tt := range []struct {
		name, failing string
		set           func(o *Options)
	}{
		{"root owns the namespace", "user namespace owner", func(o *Options) { o.ownerOf = func(string) (string, error) { return "0", nil } }},
		{"shared range", "a uid range of its own", func(o *Options) { o.SharedRange = true }},
		{"another sandbox in the range", "a uid range of its own", func(o *Options) { o.SharedWith = "sb2" }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := build(t, []fakeProcess{p})
			tt.set(&o)
			rep := Check("sb1", 1, o)
			var failed []string
			for _, c := range rep.Processes[0].Checks {
				if !c.Pass {
					failed = append(failed, c.Name)
				}
			}
			if rep.Pass || len(failed) != 1 || failed[0] != tt.failing {
				t.Errorf("failed %v, want only %q; pass %v", failed, tt.failing, rep.Pass)
			}
		})
	}
}
