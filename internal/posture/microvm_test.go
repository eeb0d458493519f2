package posture

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

const qemuStatus = "Name:\tqemu-system-x86\nUid:\t1065535\t1065535\t1065535\t1065535\nGid:\t1065535\t1065535\t1065535\t1065535\n" +
	"CapInh:\t0000000000000000\nCapPrm:\t0000000000000000\nCapEff:\t0000000000000000\nCapBnd:\t0000000000000000\nCapAmb:\t0000000000000000\n" +
	"NoNewPrivs:\t1\nSeccomp:\t2\n"

func TestCheckMicrovm(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	good := fakeProcess{pid: 10, status: qemuStatus, ns: "sb", uidMap: "0 0 4294967295\n", cgroup: cg}
	const layer = "/var/lib/agentbox/cache/microvm/layers/0123.erofs"
	tests := []struct {
		name    string
		mutate  func(p *fakeProcess)
		fd      string // an extra fd's target
		flags   string // its fdinfo flags
		failing string
	}{
		{"good", func(*fakeProcess) {}, layer, "0100000", ""},
		{"no seccomp", func(p *fakeProcess) { p.status = replace(p.status, "Seccomp:\t2", "Seccomp:\t0") }, "", "", "Seccomp"},
		{"a bounding capability", func(p *fakeProcess) {
			p.status = replace(p.status, "CapBnd:\t0000000000000000", "CapBnd:\t0000000000200000")
		}, "", "", "CapBnd"},
		{"host root", func(p *fakeProcess) { p.status = replace(p.status, "Uid:\t1065535", "Uid:\t0") }, "", "", "host uids/gids"},
		{"host namespaces", func(p *fakeProcess) { p.ns = "host" }, "", "", "ipc namespace"},
		{"wrong cgroup", func(p *fakeProcess) { p.cgroup = "4:memory:/\n3:pids:/agentbox/sb1\n" }, "", "", "memory cgroup"},
		{"host file open", func(*fakeProcess) {}, "/etc/passwd", "0100000", "open fds"},
		{"layer image writable", func(*fakeProcess) {}, layer, "0100002", "open fds"},
		{"another sandbox's disk", func(*fakeProcess) {}, "/var/lib/agentbox/storage/sandboxes/sb2/work/microvm-rw.img", "0100002", "open fds"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.mutate(&p)
			o := build(t, []fakeProcess{p})
			dir := filepath.Join(o.ProcRoot, strconv.Itoa(p.pid))
			if err := os.MkdirAll(filepath.Join(dir, "fdinfo"), 0o755); err != nil {
				t.Fatal(err)
			}
			for i, target := range []string{"socket:[12]", "anon_inode:[eventfd]", "/dev/null", "/memfd:agentbox-vm-ram",
				"/run/agentbox/sandboxes/sb1/vm/console.log", "/var/lib/agentbox/storage/sandboxes/sb1/work/microvm-rw.img", tt.fd} {
				if target == "" {
					continue
				}
				if err := os.Symlink(target, filepath.Join(dir, "fd", strconv.Itoa(i))); err != nil {
					t.Fatal(err)
				}
				flags := "02"
				if target == tt.fd {
					flags = tt.flags
				}
				if err := os.WriteFile(filepath.Join(dir, "fdinfo", strconv.Itoa(i)), []byte("pos:\t0\nflags:\t"+flags+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			o.UIDBase = 1000000
			rep := CheckMicrovm("sb1", p.pid, o)
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

// TestCheckMicrovmQEMUAlone: a process other than QEMU in the sandbox's
// cgroups fails, and so does QEMU outside them.
func TestCheckMicrovmQEMUAlone(t *testing.T) {
	cg := "4:memory:/agentbox/sb1\n3:pids:/agentbox/sb1\n2:cpu,cpuacct:/agentbox/sb1\n"
	o := build(t, []fakeProcess{{pid: 10, status: qemuStatus, ns: "sb", cgroup: cg}, {pid: 12, status: qemuStatus, ns: "sb", cgroup: cg}})
	if rep := CheckMicrovm("sb1", 10, o); rep.Pass {
		t.Error("a sandbox with a second process beside QEMU passed")
	}
	if rep := CheckMicrovm("sb1", 11, o); rep.Pass {
		t.Error("a sandbox whose QEMU is outside its cgroups passed")
	}
}
