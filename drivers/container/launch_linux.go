package container

import (
	"errors"
	"os"
	"os/exec"
	"sync"

	"github.com/agentbox/agentbox/internal/guest/launcher"
)

// startGuest starts the guest agent's command through the pre-forked
// launcher (internal/guest/launcher: a fork from a small process instead
// of from the daemon's whole address space) and returns its pid and a
// channel closed when it exits. The clone is made as host uid owner, so
// the sandbox's user namespace is its own root's (launcher.StartOwned).
// If no launcher can run (an older guest binary without the launcher
// mode, or AGENTBOX_LAUNCHER=off), it starts the command from the daemon
// itself, as before, and says so once. With tasks (v1 tasks files) the
// child is born in those cgroups (launcher.StartIn); inCgroups says so,
// false from a launcher older than that.
func (d *Driver) startGuest(cmd *exec.Cmd, owner int, tasks []*os.File) (pid int, exited chan struct{}, inCgroups bool, err error) {
	if d.launch != nil && os.Getenv("AGENTBOX_LAUNCHER") != "off" {
		pid, exited, inCgroups, err := d.launch.StartIn(cmd, owner, tasks)
		if err == nil || !errors.Is(err, launcher.ErrUnavailable) {
			return pid, exited, inCgroups, err
		}
		d.launchWarn.Do(func() {
			d.log.Warn("the pre-forked launcher is unavailable; starting sandboxes from the daemon (slower as the daemon grows)", "err", err)
		})
	}
	if err := launcher.StartIn(cmd, owner, tasks); err != nil {
		return 0, nil, false, err
	}
	exited = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	return cmd.Process.Pid, exited, len(tasks) > 0, nil
}

// launchState is the driver's launcher; New sets it up.
type launchState struct {
	launch     *launcher.Client
	launchWarn sync.Once
}
