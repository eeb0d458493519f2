package guest

import (
	"bufio"
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/code"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// The code interpreter's kernels are background processes of the agent
// (listed by GET /processes with the tag kernel:<context>): the code
// package asks for them through kernelSpawner.

// kernelSpawner implements code.Spawner over the Server's processes.
type kernelSpawner struct{ s *Server }

var _ code.Spawner = kernelSpawner{}

func (k kernelSpawner) Spawn(sp code.SpawnSpec) (code.Proc, error) {
	before := k.s.oomKills()
	b, err := k.s.startBackground(&api.StartProcessRequest{Cmd: sp.Argv, Env: sp.Env, Cwd: sp.Cwd, User: sp.User, Tag: sp.Tag, MaxBufferBytes: 64 << 10})
	if err != nil {
		return nil, err
	}
	return &kernelProc{s: k.s, b: b, oomBefore: before}, nil
}

func (k kernelSpawner) UserIDs(name string) (uid, gid int, err error) {
	if name == "" {
		name = k.s.cfg.User
	}
	u, err := users.Lookup(name)
	if err != nil {
		return 0, 0, fmt.Errorf("resolving user: %w", err)
	}
	return u.UID, u.GID, nil
}

// kernelProc is a kernel's background process.
type kernelProc struct {
	s         *Server
	b         *bgProc
	oomBefore int64
}

func (p *kernelProc) Pid() int              { return p.b.p.pid }
func (p *kernelProc) Done() <-chan struct{} { return p.b.done }
func (p *kernelProc) Interrupt() error      { return unix.Kill(-p.b.p.pid, unix.SIGINT) }
func (p *kernelProc) Kill()                 { p.b.p.kill(p.s) }
func (p *kernelProc) Terminate()            { _ = signalTree(p.b.p, unix.SIGTERM, true) }

// ExitReason says how the kernel ended, naming an OOM kill when the
// sandbox's cgroup counted one meanwhile, with its last stderr lines.
func (p *kernelProc) ExitReason() string {
	info := p.b.info()
	var why string
	switch {
	case info.Signal != "":
		why = "killed by " + info.Signal
		if info.Signal == "SIGKILL" && p.s.oomKills() > p.oomBefore {
			why += " (out of memory: the sandbox's memory limit was reached)"
		}
	case info.ExitCode != nil:
		why = "exit code " + strconv.Itoa(*info.ExitCode)
	default:
		why = "ended"
	}
	data, _, _, _, _ := p.b.stderr.readFrom(0, 0)
	if tail := lastLines(data, 5, 1024); tail != "" {
		why += "; its last stderr: " + tail
	}
	return why
}

// lastLines returns up to n last lines of data, at most max bytes.
func lastLines(data []byte, n, max int) string {
	data = bytes.TrimSpace(data)
	if len(data) > max {
		data = data[len(data)-max:]
	}
	lines := strings.Split(string(data), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// oomKills sums the oom_kill counters of the sandbox's memory cgroups
// (memory.events on v2, memory.oom_control on v1); 0 without cgroups.
func (s *Server) oomKills() int64 {
	if s.cgroups == nil {
		return 0
	}
	var total int64
	for _, r := range s.cgroups.roots {
		for _, name := range []string{"memory.events", "memory.oom_control"} {
			fd, err := unix.Openat(r.FD, name, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			buf := make([]byte, 4096)
			n, _ := unix.Read(fd, buf)
			unix.Close(fd)
			sc := bufio.NewScanner(bytes.NewReader(buf[:max(n, 0)]))
			for sc.Scan() {
				if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
					c, _ := strconv.ParseInt(v, 10, 64)
					total += c
				}
			}
		}
	}
	return total
}
