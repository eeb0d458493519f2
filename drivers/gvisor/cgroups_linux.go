package gvisor

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// runscHierarchies are the v1 hierarchies in which runsc made a
// sandbox's cgroup when it read the sandbox's real cgroups (the
// obsolete gvisor_memory_view; runsc now reads the view's,
// view_linux.go): it named them /sys/fs/cgroup/<controller>/<parent>/<id>
// and removed them at `runsc delete`. The driver still removes any left
// by sandboxes created that way (a daemon killed during a create,
// Cleanup, sandboxes adopted after an upgrade).
var runscHierarchies = []string{"blkio", "devices", "hugetlb", "net_cls", "net_prio", "perf_event", "rdma", "systemd"}

// removeRunscCgroups removes sandbox id's cgroups in runscHierarchies
// under parent; absent ones are skipped. Its processes are gone by then
// (the driver's own cgroups were killed and removed).
func removeRunscCgroups(parent, id string) error {
	var errs []error
	for _, h := range runscHierarchies {
		dir := filepath.Join("/sys/fs/cgroup", h, parent, id)
		if err := unix.Rmdir(dir); err != nil && err != unix.ENOENT {
			errs = append(errs, fmt.Errorf("removing runsc's cgroup %s: %w", dir, err))
		}
	}
	return errors.Join(errs...)
}

// strayRunscCgroups names the sandboxes under parent in runscHierarchies
// that keep does not hold.
func strayRunscCgroups(parent string, keep map[string]bool) []string {
	seen := map[string]bool{}
	var out []string
	for _, h := range runscHierarchies {
		ents, _ := os.ReadDir(filepath.Join("/sys/fs/cgroup", h, parent))
		for _, e := range ents {
			if e.IsDir() && !keep[e.Name()] && !seen[e.Name()] {
				seen[e.Name()] = true
				out = append(out, e.Name())
			}
		}
	}
	return out
}
