package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

// fakeV2 is a directory tree that stands in for cgroupfs v2: its mkdir
// makes the interface files the kernel would, with these contents.
type fakeV2 struct {
	root  string
	files map[string]string
}

func newFakeV2(t *testing.T) *fakeV2 {
	f := &fakeV2{root: t.TempDir(), files: map[string]string{
		"cgroup.procs": "", "cgroup.threads": "", "cgroup.subtree_control": "",
		"cgroup.freeze": "0", "cgroup.events": "populated 0\nfrozen 1\n", "cgroup.kill": "",
		"cpu.max": "max 100000", "cpu.stat": "usage_usec 1500\nuser_usec 1000\n",
		"memory.max": "max", "memory.swap.max": "max", "memory.current": "4096",
		"memory.events": "low 0\nhigh 0\nmax 3\noom 2\noom_kill 1\n",
		"pids.max":      "max", "pids.current": "2",
	}}
	if err := os.WriteFile(f.root+"/cgroup.subtree_control", nil, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fakeV2) mkdir(p string) error {
	if err := os.Mkdir(p, 0o755); err != nil {
		return err
	}
	for name, v := range f.files {
		if err := os.WriteFile(filepath.Join(p, name), []byte(v), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeV2) read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(f.root, rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestV2New(t *testing.T) {
	f := newFakeV2(t)
	if _, err := newV2(f.root, "a/b", f.mkdir); err != nil {
		t.Fatal(err)
	}
	for _, rel := range []string{"cgroup.subtree_control", "a/cgroup.subtree_control", "a/b/cgroup.subtree_control"} {
		if got := f.read(t, rel); got != "+cpu +memory +pids" {
			t.Errorf("%s = %q, want the three controllers enabled", rel, got)
		}
	}
	// Again, over the existing tree.
	if _, err := newV2(f.root, "a/b", f.mkdir); err != nil {
		t.Errorf("second newV2: %v", err)
	}
}

func TestV2Limits(t *testing.T) {
	tests := []struct {
		name   string
		r      Resources
		set    bool // Set on a live cgroup instead of Create
		noSwap bool // kernel without swap accounting
		want   map[string]string
	}{
		{name: "all", r: Resources{CPU: 1.5, MemoryBytes: 1 << 30, Pids: 100}, want: map[string]string{
			"cpu.max": "150000 100000", "memory.max": "1073741824", "memory.swap.max": "0", "pids.max": "100"}},
		{name: "tiny cpu", r: Resources{CPU: 0.001}, want: map[string]string{"cpu.max": "1000 100000"}},
		{name: "zero is untouched on create", r: Resources{}, want: map[string]string{
			"cpu.max": "max 100000", "memory.max": "max", "memory.swap.max": "0", "pids.max": "max"}},
		{name: "set unlimited", r: Resources{}, set: true, want: map[string]string{
			"cpu.max": "max 100000", "memory.max": "max", "pids.max": "max"}},
		{name: "no swap file", r: Resources{MemoryBytes: 1 << 20}, noSwap: true, want: map[string]string{"memory.max": "1048576"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeV2(t)
			if tt.noSwap {
				delete(f.files, "memory.swap.max")
			}
			if tt.set {
				f.files["cpu.max"], f.files["memory.max"], f.files["pids.max"] = "5000 100000", "1", "1"
			}
			m, err := newV2(f.root, "agentbox", f.mkdir)
			if err != nil {
				t.Fatal(err)
			}
			cg, err := m.Create("sb", Resources{})
			if tt.set {
				if err == nil {
					err = cg.Set(tt.r)
				}
			} else {
				os.RemoveAll(filepath.Join(f.root, "agentbox/sb"))
				cg, err = m.Create("sb", tt.r)
			}
			if err != nil {
				t.Fatal(err)
			}
			for file, want := range tt.want {
				if got := f.read(t, "agentbox/sb/"+file); got != want {
					t.Errorf("%s = %q, want %q", file, got, want)
				}
			}
			if got := cg.Paths()[""]; got != filepath.Join(f.root, "agentbox/sb") {
				t.Errorf("Paths()[\"\"] = %q", got)
			}
		})
	}
}

func TestV2Cgroup(t *testing.T) {
	f := newFakeV2(t)
	m, err := newV2(f.root, "agentbox", f.mkdir)
	if err != nil {
		t.Fatal(err)
	}
	if m.Version() != 2 {
		t.Errorf("Version = %d", m.Version())
	}
	cg, err := m.Create("sb", Resources{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.Create("sb", Resources{}); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Errorf("second Create = %v, want already exists", err)
	}
	if _, err := m.Create("a/b", Resources{}); !errors.Is(err, errdefs.ErrInvalidArgument) {
		t.Errorf("Create(a/b) = %v, want invalid argument", err)
	}
	if _, err := m.Open("nope"); !errors.Is(err, errdefs.ErrNotFound) {
		t.Errorf("Open(nope) = %v, want not found", err)
	}
	if names, err := m.List(); err != nil || strings.Join(names, ",") != "sb" {
		t.Errorf("List = %v, %v", names, err)
	}

	t.Run("AddProc and Procs", func(t *testing.T) {
		if err := cg.AddProc(42); err != nil {
			t.Fatal(err)
		}
		if got := f.read(t, "agentbox/sb/cgroup.procs"); got != "42" {
			t.Errorf("cgroup.procs = %q", got)
		}
		f.mkdir(filepath.Join(f.root, "agentbox/sb/inner"))
		os.WriteFile(filepath.Join(f.root, "agentbox/sb/inner/cgroup.procs"), []byte("7\n99\n"), 0o644)
		procs, err := cg.Procs()
		if err != nil || len(procs) != 3 || procs[0] != 7 || procs[1] != 42 || procs[2] != 99 {
			t.Errorf("Procs = %v, %v, want [7 42 99]", procs, err)
		}
	})
	t.Run("Stats", func(t *testing.T) {
		st, err := cg.Stats()
		want := Stats{MemoryBytes: 4096, CPUNanos: 1500000, Pids: 2, OOMKills: 1}
		if err != nil || st != want {
			t.Errorf("Stats = %+v, %v, want %+v", st, err, want)
		}
	})
	t.Run("Freeze", func(t *testing.T) {
		if err := cg.Freeze(); err != nil {
			t.Fatal(err)
		}
		if got := f.read(t, "agentbox/sb/cgroup.freeze"); got != "1" {
			t.Errorf("cgroup.freeze = %q after Freeze", got)
		}
		if frozen, err := cg.Frozen(); err != nil || !frozen {
			t.Errorf("Frozen = %v, %v after Freeze", frozen, err)
		}
		if err := cg.Thaw(); err != nil {
			t.Fatal(err)
		}
		if got := f.read(t, "agentbox/sb/cgroup.freeze"); got != "0" {
			t.Errorf("cgroup.freeze = %q after Thaw", got)
		}
		if frozen, err := cg.Frozen(); err != nil || frozen {
			t.Errorf("Frozen = %v, %v after Thaw", frozen, err)
		}
		// A child frozen by someone else (the agent, killing an exec's
		// tree) is thawed by ThawTree, with the cgroup itself.
		f.mkdir(filepath.Join(f.root, "agentbox/sb/exec-1"))
		os.WriteFile(filepath.Join(f.root, "agentbox/sb/exec-1/cgroup.freeze"), []byte("1"), 0o644)
		os.WriteFile(filepath.Join(f.root, "agentbox/sb/cgroup.freeze"), []byte("1"), 0o644)
		if err := cg.ThawTree(); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"agentbox/sb/cgroup.freeze", "agentbox/sb/exec-1/cgroup.freeze"} {
			if got := f.read(t, rel); got != "0" {
				t.Errorf("%s = %q after ThawTree", rel, got)
			}
		}
	})
	t.Run("Delegate", func(t *testing.T) {
		if os.Geteuid() != 0 {
			t.Skip("needs root to chown")
		}
		if err := cg.Delegate(100000, 100001); err != nil {
			t.Fatal(err)
		}
		for _, rel := range []string{"", "cgroup.procs", "cgroup.threads", "cgroup.subtree_control"} {
			fi, err := os.Stat(filepath.Join(f.root, "agentbox/sb", rel))
			if err != nil {
				t.Fatal(err)
			}
			st := fi.Sys().(*syscall.Stat_t)
			if st.Uid != 100000 || st.Gid != 100001 {
				t.Errorf("%q owned by %d:%d, want 100000:100001", rel, st.Uid, st.Gid)
			}
		}
	})
	t.Run("FD", func(t *testing.T) {
		fd, err := cg.FD()
		if err != nil {
			t.Fatal(err)
		}
		defer syscall.Close(fd)
		var st syscall.Stat_t
		if err := syscall.Fstat(fd, &st); err != nil || st.Mode&syscall.S_IFDIR == 0 {
			t.Errorf("FD is not the cgroup directory: %v", err)
		}
	})
	t.Run("Kill writes cgroup.kill", func(t *testing.T) {
		os.WriteFile(filepath.Join(f.root, "agentbox/sb/cgroup.procs"), nil, 0o644)
		os.WriteFile(filepath.Join(f.root, "agentbox/sb/inner/cgroup.procs"), nil, 0o644)
		if err := cg.Kill(); err != nil {
			t.Fatal(err)
		}
		if got := f.read(t, "agentbox/sb/cgroup.kill"); got != "1" {
			t.Errorf("cgroup.kill = %q", got)
		}
	})
}

func TestV1Mounts(t *testing.T) {
	const info = `25 1 0:22 / /sys/fs/cgroup ro - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
27 25 0:24 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
28 25 0:25 / /sys/fs/cgroup/pids rw - cgroup cgroup rw,pids
29 25 0:26 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
30 25 0:27 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw
31 25 0:28 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,name=systemd`
	got := v1Mounts(info)
	want := map[string]string{
		"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids", "freezer": "/sys/fs/cgroup/freezer",
	}
	if len(got) != len(want) {
		t.Errorf("v1Mounts = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s at %q, want %q", k, got[k], v)
		}
	}
	// Co-mounted controllers share one directory, made once.
	m, err := newV1(map[string]string{"cpu": t.TempDir(), "memory": t.TempDir(), "pids": t.TempDir(), "freezer": t.TempDir()}, "x")
	if err == nil {
		t.Errorf("newV1 without cpuacct = %v, want an error", m)
	}
	shared := t.TempDir()
	m, err = newV1(map[string]string{"cpu": shared, "cpuacct": shared, "memory": t.TempDir(), "pids": t.TempDir(), "freezer": t.TempDir()}, "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.dirs) != 4 {
		t.Errorf("dirs = %v, want 4 distinct", m.dirs)
	}
}
