package posture

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

const sentryStatus = "Name:\texe\nUid:\t1000000\t1000000\t1000000\t1000000\nGid:\t1000000\t1000000\t1000000\t1000000\n" +
	"CapInh:\t0000000000000000\nCapPrm:\t000000000008001f\nCapEff:\t000000000008001f\nCapBnd:\t000000000008001f\nCapAmb:\t0000000000000000\n" +
	"NoNewPrivs:\t1\nSeccomp:\t2\n"

func TestCheckGvisor(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	good := fakeProcess{pid: 10, status: sentryStatus, ns: "sb", uidMap: "0 1000000 65536\n", cgroup: cg}
	tests := []struct {
		name    string
		mutate  func(p *fakeProcess)
		fd      string // an extra fd's target
		failing string
	}{
		{"good", func(*fakeProcess) {}, "", ""},
		{"no seccomp", func(p *fakeProcess) { p.status = replace(p.status, "Seccomp:\t2", "Seccomp:\t0") }, "", "Seccomp"},
		{"sys_admin", func(p *fakeProcess) {
			p.status = replace(p.status, "CapBnd:\t000000000008001f", "CapBnd:\t000000000028001f")
		}, "", "CapBnd"},
		{"host root", func(p *fakeProcess) { p.status = replace(p.status, "Uid:\t1000000", "Uid:\t0") }, "", "host uids/gids"},
		{"host namespaces", func(p *fakeProcess) { p.ns = "host" }, "", "ipc namespace"},
		{"wrong cgroup", func(p *fakeProcess) { p.cgroup = "4:memory:/\n3:pids:/agentbox/sb1\n" }, "", "memory cgroup"},
		{"host file open", func(*fakeProcess) {}, "/etc/passwd", "open fds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.mutate(&p)
			o := build(t, []fakeProcess{p})
			fds := filepath.Join(o.ProcRoot, strconv.Itoa(p.pid), "fd")
			for i, target := range []string{"socket:[12]", "anon_inode:[eventfd]", "/dev/null", "/memfd:runsc-memory (deleted)", tt.fd} {
				if target != "" {
					if err := os.Symlink(target, filepath.Join(fds, strconv.Itoa(i))); err != nil {
						t.Fatal(err)
					}
				}
			}
			rep := CheckGvisor("sb1", p.pid, o)
			if len(rep.Processes) != 1 {
				t.Fatalf("checked %d processes, want 1: %+v", len(rep.Processes), rep.Processes)
			}
			var failed []string
			for _, c := range rep.Processes[0].Checks {
				if !c.Pass {
					failed = append(failed, c.Name)
				}
			}
			if tt.failing == "" {
				if !rep.Pass || len(failed) > 0 {
					t.Errorf("good process failed %v: %+v", failed, rep.Processes[0].Checks)
				}
				return
			}
			if rep.Pass || len(failed) == 0 || failed[0] != tt.failing {
				t.Errorf("failed checks %v, want first %q; report pass %v", failed, tt.failing, rep.Pass)
			}
		})
	}
}

func TestCheckGvisorSentryMissing(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	o := build(t, []fakeProcess{{pid: 10, status: sentryStatus, ns: "sb", uidMap: "0 1000000 65536\n", cgroup: cg}})
	if rep := CheckGvisor("sb1", 11, o); rep.Pass {
		t.Error("a sandbox whose Sentry is outside its cgroups passed")
	}
}

// TestSandboxFilesDeletedInBoundDir: a deleted file counts as the
// sandbox's only when its name is under a bound directory's destination
// and it is on that directory's filesystem (the gofer keeps the guest's
// socket of before a memory snapshot open); any other deleted file, or
// one on another filesystem under that name, is outside.
func TestSandboxFilesDeletedInBoundDir(t *testing.T) {
	f := &sandboxFiles{ok: true, rootDev: 1, ids: map[[2]uint64]bool{}, dirs: map[string]uint64{"/.agentbox/sock": 7}}
	for _, c := range []struct {
		dev    uint64
		target string
		want   bool
	}{
		{7, "/root/.agentbox/sock/guest.sock (deleted)", true}, // as the gofer names it
		{7, "/.agentbox/sock/guest.sock (deleted)", true},
		{7, "/root/.agentbox/sock/guest.sock", false}, // present: only by its id
		{9, "/root/.agentbox/sock/guest.sock (deleted)", false},
		{7, "/root/.agentbox/socket (deleted)", false},
		{7, "/tmp/.agentbox/sock/x (deleted)", false},
		{7, "/etc/shadow (deleted)", false},
		{1, "/anything (deleted)", true}, // on the sandbox's root
	} {
		if got := f.has(unix.Stat_t{Dev: c.dev, Ino: 42}, c.target); got != c.want {
			t.Errorf("has(dev %d, %q) = %v, want %v", c.dev, c.target, got, c.want)
		}
	}
}
