package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/errdefs"
)

// How long Freeze and Kill wait for the kernel before giving up.
const (
	freezeTimeout = 5 * time.Second
	killTimeout   = 10 * time.Second
)

// gone reports whether err says a cgroup was removed meanwhile: a file or
// directory not found, or (read through a descriptor opened before the
// rmdir) ENODEV.
func gone(err error) bool {
	return errors.Is(err, os.ErrNotExist) || errors.Is(err, unix.ENODEV)
}

// subdirs lists dir and every cgroup below it, parents before children.
func subdirs(dir string) ([]string, error) {
	out := []string{dir}
	for i := 0; i < len(out); i++ {
		ents, err := os.ReadDir(out[i])
		if err != nil {
			if i > 0 && gone(err) {
				continue // removed meanwhile
			}
			return nil, err
		}
		for _, e := range ents {
			if e.IsDir() {
				out = append(out, filepath.Join(out[i], e.Name()))
			}
		}
	}
	return out, nil
}

// treeProcs reads cgroup.procs in every cgroup under each root.
func treeProcs(roots []string) ([]int, error) {
	seen := map[int]bool{}
	for _, root := range roots {
		dirs, err := subdirs(root)
		if errors.Is(err, os.ErrNotExist) {
			continue // destroyed, or never made in this hierarchy
		}
		if err != nil {
			return nil, err
		}
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, "cgroup.procs"))
			if err != nil {
				if gone(err) {
					continue // removed meanwhile
				}
				return nil, err
			}
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil {
					seen[pid] = true
				}
			}
		}
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids, nil
}

// removeTree removes every cgroup under each root, children first. Absent
// directories are fine. rmdir can briefly fail with EBUSY while dying
// tasks leave; it is retried.
func removeTree(roots []string) error { return removeTreeUntil(roots, time.Now().Add(killTimeout)) }

// removeTreeOnce is removeTree without the retries: EBUSY (a process
// inside) is an error at once, and what was removed stays removed.
func removeTreeOnce(roots []string) error { return removeTreeUntil(roots, time.Time{}) }

func removeTreeUntil(roots []string, deadline time.Time) error {
	for _, root := range roots {
		dirs, err := subdirs(root)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return classify(err, "listing cgroups")
		}
		for i := len(dirs) - 1; i >= 0; i-- {
			for {
				err := unix.Rmdir(dirs[i])
				if err == nil || err == unix.ENOENT {
					break
				}
				if err != unix.EBUSY || time.Now().After(deadline) {
					return classify(&os.PathError{Op: "rmdir", Path: dirs[i], Err: err}, "removing cgroup")
				}
				time.Sleep(time.Millisecond)
			}
		}
	}
	return nil
}

// thawTree writes thawed into file in root and every cgroup below it,
// parents first; a cgroup removed meanwhile is skipped.
func thawTree(root, file, thawed string) error {
	dirs, err := subdirs(root)
	if err != nil {
		return classify(err, "listing cgroups")
	}
	var errs []error
	for _, d := range dirs {
		if err := writeFile(filepath.Join(d, file), thawed); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, classify(err, "thawing cgroup "+d))
		}
	}
	return errors.Join(errs...)
}

// killLoop SIGKILLs everything in the cgroup until it is empty. freeze
// and thaw stop forks racing the kill; procs lists what is left.
func killLoop(procs func() ([]int, error), freeze, thaw func() error) error {
	deadline := time.Now().Add(killTimeout)
	for sleep := 100 * time.Microsecond; ; sleep = min(2*sleep, 10*time.Millisecond) {
		pids, err := procs()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: %d processes still in the cgroup after SIGKILL (stuck in the kernel?): %s",
				errdefs.ErrUnavailable, len(pids), describePids(pids))
		}
		// A failed freeze still leaves SIGKILL, only with a race against
		// forks, which the next round catches.
		frozen := freeze() == nil
		if frozen {
			if pids, err = procs(); err != nil {
				thaw()
				return err
			}
		}
		for _, p := range pids {
			unix.Kill(p, unix.SIGKILL) // ESRCH: already gone
		}
		if err := thaw(); err != nil && frozen {
			return err
		}
		time.Sleep(sleep)
	}
}

// waitFor polls check until it answers true or the timeout passes.
func waitFor(timeout time.Duration, check func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for sleep := 50 * time.Microsecond; ; sleep = min(2*sleep, 5*time.Millisecond) {
		ok, err := check()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: timed out after %v", errdefs.ErrUnavailable, timeout)
		}
		time.Sleep(sleep)
	}
}

// describePids names each pid with its state and parent from
// /proc/PID/status (a zombie whose parent never reaps it stays in a v1
// cgroup), for the error of a kill that did not empty a cgroup.
func describePids(pids []int) string {
	var out []string
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			out = append(out, strconv.Itoa(p))
			continue
		}
		var name, state, ppid string
		for _, line := range strings.Split(string(b), "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch k {
			case "Name":
				name = strings.TrimSpace(v)
			case "State":
				state = strings.TrimSpace(v)
			case "PPid":
				ppid = strings.TrimSpace(v)
			}
		}
		out = append(out, fmt.Sprintf("%d (%s, %s, parent %s)", p, name, state, ppid))
	}
	return strings.Join(out, ", ")
}
