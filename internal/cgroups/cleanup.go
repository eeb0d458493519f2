package cgroups

import (
	"errors"
	"fmt"

	"github.com/agentbox/agentbox/errdefs"
)

// RemoveExcept destroys every cgroup under m's parent whose name is not in
// keep (killing what still runs in it) and returns what it removed, for
// the log. Drivers call it at daemon start to clear what a crash left.
func RemoveExcept(m Manager, keep map[string]bool) ([]string, error) {
	return RemoveUnless(m, func(name string) bool { return keep[name] })
}

// RemoveUnless is RemoveExcept with keep asked of each name as it comes:
// a driver whose cgroups come and go meanwhile (a pre-spawned init's)
// answers for the present, not for a list taken before.
func RemoveUnless(m Manager, keep func(name string) bool) ([]string, error) {
	names, err := m.List()
	if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, n := range names {
		if keep(n) {
			continue
		}
		cg, err := m.Open(n)
		if err != nil {
			continue
		}
		if err := cg.Destroy(); err != nil {
			if _, oerr := m.Open(n); errors.Is(oerr, errdefs.ErrNotFound) {
				// Gone meanwhile: its owner removed it while it was being
				// killed (a pre-spawned init that exited), which is what
				// this cleanup wanted.
				continue
			}
			errs = append(errs, fmt.Errorf("cgroup %s: %w", n, err))
			continue
		}
		removed = append(removed, "cgroup "+n)
	}
	return removed, errors.Join(errs...)
}
