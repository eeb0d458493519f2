package cgroups

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Child makes the child cgroup <this>/<name> in every controller and
// applies r there. A sandbox uses one for its workload, so that the
// workload's pids and memory limits cannot starve or OOM-kill the guest
// agent, which lives in the parent with a small reserve on top.
func (c *v1Cgroup) Child(name string, r Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	ch := &v1Cgroup{name: c.name + "/" + name, paths: make(map[string]string, len(c.paths)), dirs: make([]string, len(c.dirs))}
	for ctrl, d := range c.paths {
		ch.paths[ctrl] = d + "/" + name
	}
	for i, d := range c.dirs {
		ch.dirs[i] = d + "/" + name
		if err := unix.Mkdir(ch.dirs[i], 0o755); err != nil {
			removeTree(ch.dirs[:i])
			return nil, classify(&os.PathError{Op: "mkdir", Path: ch.dirs[i], Err: err}, "creating cgroup "+ch.name)
		}
	}
	if err := ch.apply(r, true); err != nil {
		removeTree(ch.dirs)
		return nil, err
	}
	return ch, nil
}

func (c *v1Cgroup) Sub(name string) Cgroup {
	ch := &v1Cgroup{name: c.name + "/" + name, paths: make(map[string]string, len(c.paths)), dirs: make([]string, len(c.dirs))}
	for ctrl, d := range c.paths {
		ch.paths[ctrl] = d + "/" + name
	}
	for i, d := range c.dirs {
		ch.dirs[i] = d + "/" + name
	}
	return ch
}

// Child implements Cgroup. On v2 the parent must hold no processes once
// it delegates controllers to children: put them in a leaf of their own.
func (c *v2Cgroup) Child(name string, r Resources) (Cgroup, error) {
	if err := validName(name); err != nil {
		return nil, err
	}
	if err := writeFile(c.dir+"/cgroup.subtree_control", v2Controllers); err != nil {
		return nil, classify(err, fmt.Sprintf("enabling controllers in %s", c.dir))
	}
	ch := &v2Cgroup{name: c.name + "/" + name, dir: c.dir + "/" + name}
	if err := unix.Mkdir(ch.dir, 0o755); err != nil {
		return nil, classify(&os.PathError{Op: "mkdir", Path: ch.dir, Err: err}, "creating cgroup "+ch.name)
	}
	if err := ch.apply(r, true); err != nil {
		unix.Rmdir(ch.dir)
		return nil, err
	}
	return ch, nil
}

func (c *v2Cgroup) Sub(name string) Cgroup {
	return &v2Cgroup{name: c.name + "/" + name, dir: c.dir + "/" + name}
}
