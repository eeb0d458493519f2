package guest

import (
	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/desktop"
)

// The desktop's pieces (Xvfb, openbox, x11vnc) and the programs launched
// on it are background processes of the agent, listed by GET /processes
// with their tags (desktop-x, desktop-wm, desktop-vnc, desktop-app-N):
// the desktop package asks for them through desktopSpawner.

// desktopSpawner implements desktop.Spawner over the Server's processes.
type desktopSpawner struct{ s *Server }

var _ desktop.Spawner = desktopSpawner{}

func (d desktopSpawner) Spawn(sp desktop.SpawnSpec) (desktop.Proc, error) {
	before := d.s.oomKills()
	b, err := d.s.startBackground(&api.StartProcessRequest{Cmd: sp.Argv, Env: sp.Env, Cwd: sp.Cwd, Tag: sp.Tag, MaxBufferBytes: 64 << 10})
	if err != nil {
		return nil, err
	}
	return desktopProc{&kernelProc{s: d.s, b: b, oomBefore: before}}, nil
}

func (d desktopSpawner) UserIDs() (uid, gid int, err error) {
	return kernelSpawner(d).UserIDs("")
}

// desktopProc is a kernel's process type with its api.Process view.
type desktopProc struct{ *kernelProc }

func (p desktopProc) Info() api.Process { return p.b.info() }
