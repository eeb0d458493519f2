package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// v2Controllers are enabled for the children of the parent cgroup.
const v2Controllers = "+cpu +memory +pids"

type v2Manager struct {
	dir   string // <root>/<parent>
	mkdir func(path string) error
}

// newV2 makes root/parent and enables the controllers on the way down.
// mkdir is unix.Mkdir except in tests, where a fake makes the files the
// kernel would.
func newV2(root, parent string, mkdir func(string) error) (*v2Manager, error) {
	if mkdir == nil {
		mkdir = func(p string) error { return unix.Mkdir(p, 0o755) }
	}
	m := &v2Manager{dir: filepath.Join(root, parent), mkdir: mkdir}
	d := root
	for _, el := range strings.Split(parent, "/") {
		if err := writeFile(d+"/cgroup.subtree_control", v2Controllers); err != nil {
			return nil, classify(err, fmt.Sprintf("enabling %s in %s (the cgroup must hold no processes, and the controllers must be available in cgroup.controllers)", v2Controllers, d))
		}
		d = filepath.Join(d, el)
		if err := mkdir(d); err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, classify(&os.PathError{Op: "mkdir", Path: d, Err: err}, "creating cgroup parent")
		}
	}
	if err := writeFile(d+"/cgroup.subtree_control", v2Controllers); err != nil {
		return nil, classify(err, "enabling controllers in "+d)
	}
	return m, nil
}

func (m *v2Manager) Version() int { return 2 }

func (m *v2Manager) Create(name string, r Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	cg := &v2Cgroup{name: name, dir: m.dir + "/" + name}
	if err := m.mkdir(cg.dir); err != nil {
		return nil, classify(&os.PathError{Op: "mkdir", Path: cg.dir, Err: err}, "creating cgroup "+name)
	}
	if err := cg.apply(r, true); err != nil {
		unix.Rmdir(cg.dir)
		return nil, err
	}
	return cg, nil
}

func (m *v2Manager) Open(name string) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	cg := &v2Cgroup{name: name, dir: m.dir + "/" + name}
	if _, err := os.Stat(cg.dir); err != nil {
		return nil, classify(err, "cgroup "+name)
	}
	return cg, nil
}

func (m *v2Manager) Rename(from, to string) (Cgroup, error) {
	return nil, fmt.Errorf("%w: cgroup v2 does not rename cgroups (%s to %s); create one", errdefs.ErrFailedPrecondition, from, to)
}

func (m *v2Manager) List() ([]string, error) {
	ents, err := os.ReadDir(m.dir)
	if err != nil {
		return nil, classify(err, "listing cgroups")
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, nil
}

type v2Cgroup struct {
	name string
	dir  string
}

func (c *v2Cgroup) Name() string { return c.name }

func (c *v2Cgroup) Set(r Resources) error { return c.apply(r, false) }

func (c *v2Cgroup) apply(r Resources, fresh bool) error {
	if r.CPU < 0 || r.MemoryBytes < 0 || r.Pids < 0 {
		return fmt.Errorf("%w: resource limits must not be negative: %+v", errdefs.ErrInvalidArgument, r)
	}
	if !r.KeepCPU && (r.CPU > 0 || !fresh) {
		v := fmt.Sprintf("max %d", CFSPeriodUS)
		if r.CPU > 0 {
			v = fmt.Sprintf("%d %d", CFSQuotaUS(r.CPU), CFSPeriodUS)
		}
		if err := writeFile(c.dir+"/cpu.max", v); err != nil {
			return classify(err, "setting cpu limit")
		}
	}
	if r.MemoryBytes > 0 || !fresh {
		v := "max"
		if r.MemoryBytes > 0 {
			v = strconv.FormatInt(r.MemoryBytes, 10)
		}
		if err := writeFile(c.dir+"/memory.max", v); err != nil {
			return classify(err, "setting memory limit")
		}
	}
	// No swap, ever. The file is absent without swap accounting.
	if err := writeFile(c.dir+"/memory.swap.max", "0"); err != nil && !errors.Is(err, os.ErrNotExist) {
		return classify(err, "disabling swap")
	}
	if r.Pids > 0 || !fresh {
		v := "max"
		if r.Pids > 0 {
			v = strconv.FormatInt(r.Pids, 10)
		}
		if err := writeFile(c.dir+"/pids.max", v); err != nil {
			return classify(err, "setting pids limit")
		}
	}
	return nil
}

func (c *v2Cgroup) AddProc(pid int) error {
	return classify(writeFile(c.dir+"/cgroup.procs", strconv.Itoa(pid)),
		fmt.Sprintf("adding process %d to cgroup %s", pid, c.name))
}

func (c *v2Cgroup) FD() (int, error) {
	fd, err := unix.Open(c.dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, classify(&os.PathError{Op: "open", Path: c.dir, Err: err}, "opening cgroup")
	}
	return fd, nil
}

func (c *v2Cgroup) Delegate(uid, gid int, _ ...string) error {
	for _, f := range []string{c.dir, c.dir + "/cgroup.procs", c.dir + "/cgroup.threads", c.dir + "/cgroup.subtree_control"} {
		if err := os.Chown(f, uid, gid); err != nil {
			return classify(err, "delegating cgroup")
		}
	}
	return nil
}

func (c *v2Cgroup) Paths() map[string]string { return map[string]string{"": c.dir} }

func (c *v2Cgroup) Procs() ([]int, error) {
	pids, err := treeProcs([]string{c.dir})
	return pids, classify(err, "listing processes")
}

func (c *v2Cgroup) Freeze() error {
	if err := writeFile(c.dir+"/cgroup.freeze", "1"); err != nil {
		return classify(err, "freezing cgroup "+c.name)
	}
	err := waitFor(freezeTimeout, func() (bool, error) {
		v, err := keyedInt(c.dir+"/cgroup.events", "frozen")
		return v == 1, err
	})
	if err != nil {
		writeFile(c.dir+"/cgroup.freeze", "0")
		return fmt.Errorf("freezing cgroup %s: %w", c.name, err)
	}
	return nil
}

func (c *v2Cgroup) Thaw() error {
	return classify(writeFile(c.dir+"/cgroup.freeze", "0"), "thawing cgroup "+c.name)
}

func (c *v2Cgroup) Frozen() (bool, error) {
	b, err := os.ReadFile(c.dir + "/cgroup.freeze")
	if err != nil {
		return false, classify(err, "reading the freezer state of cgroup "+c.name)
	}
	return strings.TrimSpace(string(b)) == "1", nil
}

func (c *v2Cgroup) ThawTree() error { return thawTree(c.dir, "cgroup.freeze", "0") }

func (c *v2Cgroup) Stats() (Stats, error) {
	var s Stats
	var err error
	if s.MemoryBytes, err = readInt(c.dir + "/memory.current"); err != nil {
		return s, classify(err, "reading memory usage")
	}
	usec, err := keyedInt(c.dir+"/cpu.stat", "usage_usec")
	if err != nil {
		return s, classify(err, "reading cpu usage")
	}
	s.CPUNanos = uint64(usec) * 1000
	if s.Pids, err = readInt(c.dir + "/pids.current"); err != nil {
		return s, classify(err, "reading pids")
	}
	if s.OOMKills, err = keyedInt(c.dir+"/memory.events", "oom_kill"); err != nil {
		return s, classify(err, "reading oom kills")
	}
	return s, nil
}

// Kill uses cgroup.kill (Linux 5.14), which kills the whole subtree
// without racing forks, and falls back to freeze, SIGKILL, thaw.
func (c *v2Cgroup) Kill() error {
	err := writeFile(c.dir+"/cgroup.kill", "1")
	if err == nil {
		err = waitFor(killTimeout, func() (bool, error) {
			pids, err := c.Procs()
			return len(pids) == 0, err
		})
	} else if errors.Is(err, os.ErrNotExist) {
		if _, statErr := os.Stat(c.dir); errors.Is(statErr, os.ErrNotExist) {
			return nil // already gone
		}
		err = killLoop(c.Procs, c.Freeze, c.Thaw)
	}
	if err != nil {
		return fmt.Errorf("killing cgroup %s: %w", c.name, err)
	}
	return nil
}

func (c *v2Cgroup) Destroy() error {
	// As on v1: an empty tree goes in one pass; one with a process in it
	// is killed first.
	if err := removeTreeOnce([]string{c.dir}); err == nil {
		return nil
	}
	if err := c.Kill(); err != nil {
		return err
	}
	return removeTree([]string{c.dir})
}
