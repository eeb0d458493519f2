package guest

import (
	"bytes"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// oomCounter reads how many processes the kernel's OOM killer has killed
// in the sandbox's memory cgroup: the oom_kill line of memory.events (v2,
// which counts the per-exec children too) or of memory.oom_control (v1,
// where execs run in that cgroup itself). An exec compares the count at
// its start and end to tell an OOM kill from any other SIGKILL.
type oomCounter struct {
	dir  int
	file string
}

// findOOMCounter returns the counter of the first of dirs with one, or
// nil (no memory controller there, as in a gvisor sandbox).
func findOOMCounter(dirs []CgroupDir) *oomCounter {
	for _, d := range dirs {
		for _, f := range []string{"memory.events", "memory.oom_control"} {
			c := &oomCounter{dir: d.FD, file: f}
			if c.count() >= 0 {
				return c
			}
		}
	}
	return nil
}

// count returns the number of OOM kills so far, or -1 when unknown.
func (c *oomCounter) count() int64 {
	if c == nil {
		return -1
	}
	b, err := readAt(c.dir, c.file, make([]byte, 0, 256))
	if err != nil {
		return -1
	}
	return oomKillsIn(b)
}

// oomKillsIn finds "oom_kill N" in a cgroup's keyed file; -1 if absent.
func oomKillsIn(b []byte) int64 {
	for _, line := range bytes.Split(b, []byte("\n")) {
		k, v, ok := bytes.Cut(line, []byte(" "))
		if !ok || string(k) != "oom_kill" {
			continue
		}
		n, err := strconv.ParseInt(string(bytes.TrimSpace(v)), 10, 64)
		if err != nil {
			return -1
		}
		return n
	}
	return -1
}

// oomKilled says whether p, which ended with ws, was killed by the OOM
// killer: it died of SIGKILL (or exited 137, a shell reporting its
// child's SIGKILL) and the sandbox's OOM count rose since p started.
func (s *Server) oomKilled(p *proc, ws syscall.WaitStatus) bool {
	if p.oomBefore < 0 {
		return false
	}
	killed := ws.Signaled() && ws.Signal() == unix.SIGKILL || ws.Exited() && ws.ExitStatus() == 128+int(unix.SIGKILL)
	return killed && s.oom.count() > p.oomBefore
}
