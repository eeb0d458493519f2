// Package cgroupstest is a cgroup parent for tests of the code that lists
// the cgroups under one and removes some (the drivers' start-up
// cleanups).
package cgroupstest

import "github.com/agentbox/agentbox/internal/cgroups"

// Parent answers its i-th List with Lists[i] (the last one from then on,
// as when a cgroup appears between two looks) and records each cgroup
// destroyed. A test that calls any other method gets a nil Manager's
// panic.
type Parent struct {
	cgroups.Manager
	Lists     [][]string
	Listed    int
	Destroyed []string
}

func (p *Parent) List() ([]string, error) {
	names := p.Lists[min(p.Listed, len(p.Lists)-1)]
	p.Listed++
	return names, nil
}

func (p *Parent) Open(name string) (cgroups.Cgroup, error) {
	return recorder{name: name, p: p}, nil
}

type recorder struct {
	cgroups.Cgroup
	name string
	p    *Parent
}

func (c recorder) Destroy() error {
	c.p.Destroyed = append(c.p.Destroyed, c.name)
	return nil
}
