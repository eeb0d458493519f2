package daemon

import (
	"fmt"
	"os"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/config"
)

// daemonInfo is the fixed part of GET /v1/info: unavailable maps a tier
// that did not start to why.
func daemonInfo(cfg *config.Config, unavailable map[string]error) api.Info {
	info := api.Info{
		DefaultIsolation: cfg.DefaultIsolation,
		DefaultTemplate:  cfg.DefaultTemplate,
		Defaults:         infoLimits(cfg.Defaults),
		Limits:           infoLimits(cfg.Limits),
		DataDir:          cfg.DataDir,
		RunDir:           cfg.RunDir,
		Socket:           cfg.Socket,
		Listen:           cfg.Listen,
		Log:              describeStderr(),
		NodeID:           cfg.NodeID,
	}
	for _, name := range driver.Names() {
		t := api.Tier{Name: name, Available: unavailable[name] == nil, Default: name == cfg.DefaultIsolation}
		if err := unavailable[name]; err != nil {
			t.Error = err.Error()
		}
		info.Tiers = append(info.Tiers, t)
	}
	return info
}

func infoLimits(r config.Sandbox) api.InfoLimits {
	return api.InfoLimits{TTLSeconds: int64(r.TTL / time.Second), CPU: r.CPU, MemoryMB: r.MemoryMB, DiskMB: r.DiskMB, Pids: r.Pids}
}

// describeStderr says where the daemon's log (its stderr) goes: a file's
// path, or what kind of file stderr is.
func describeStderr() string {
	target, err := os.Readlink("/proc/self/fd/2")
	if err != nil {
		return "stderr"
	}
	fi, err := os.Stderr.Stat()
	switch {
	case err != nil:
		return "stderr"
	case fi.Mode().IsRegular():
		return target
	case fi.Mode()&os.ModeSocket != 0:
		return "stderr, a socket (under systemd: journalctl -u agentbox)"
	case fi.Mode()&os.ModeCharDevice != 0:
		return fmt.Sprintf("stderr, the terminal %s", target)
	case fi.Mode()&os.ModeNamedPipe != 0:
		return "stderr, a pipe (to whatever started the daemon)"
	}
	return "stderr (" + target + ")"
}
