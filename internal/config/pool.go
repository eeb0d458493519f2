package config

import "fmt"

// WarmPool ([[pool]], one table per pool) keeps Size sandboxes of one
// template and tier created ahead of time, so that a create request that
// matches is answered by handing one out instead of booting one. The
// limits of a pool's sandboxes are its own values, or [defaults] where
// left at 0; a request whose cpu, memory_mb or pids differ is still served
// from the pool where the tier can change those limits in place, while
// template, isolation, disk_mb and the kind of egress must match (see
// docs/PERFORMANCE.md, "Warm pools").
type WarmPool struct {
	// Template (template) is the template's name. Default: default_template.
	Template string `toml:"template"`
	// Isolation (isolation) is the tier. Default: default_isolation.
	Isolation string `toml:"isolation"`
	// Size (size) is how many ready sandboxes the pool keeps, 1 to 256.
	Size int `toml:"size"`
	// CPU, MemoryMB, DiskMB and Pids (cpu, memory_mb, disk_mb, pids) are
	// the limits its sandboxes are created with; 0 takes [defaults].
	CPU      float64 `toml:"cpu"`
	MemoryMB int64   `toml:"memory_mb"`
	DiskMB   int64   `toml:"disk_mb"`
	Pids     int64   `toml:"pids"`
	// Egress (egress) is "none" (default) or "internet": pool sandboxes
	// with "internet" have their veth, address and firewall chain ready
	// and also serve requests for egress "custom" (the rules are swapped
	// when one is handed out).
	Egress string `toml:"egress"`
	// Code (code) is a language, e.g. "python": each pool sandbox starts
	// that language's kernel as its default code context while it waits,
	// so a create served from the pool runs its first cell at once. ""
	// (default) starts none.
	Code string `toml:"code"`
	// Desktop (desktop) starts each pool sandbox's display (Xvfb, the
	// window manager, x11vnc; docs/desktop.md) at the default size while
	// it waits, so a create served from the pool has its desktop running.
	Desktop bool `toml:"desktop"`
}

// maxPoolSize bounds one pool.
const maxPoolSize = 256

// WarmPools returns the configured pools with defaults filled in.
func (c Config) WarmPools() []WarmPool {
	out := make([]WarmPool, 0, len(c.Pools))
	for _, p := range c.Pools {
		out = append(out, c.withDefaults(p))
	}
	return out
}

// withDefaults is p with what it leaves unset taken from the config.
func (c Config) withDefaults(p WarmPool) WarmPool {
	if p.Template == "" {
		p.Template = c.DefaultTemplate
	}
	if p.Isolation == "" {
		p.Isolation = c.DefaultIsolation
	}
	if p.CPU == 0 {
		p.CPU = c.Defaults.CPU
	}
	if p.MemoryMB == 0 {
		p.MemoryMB = c.Defaults.MemoryMB
	}
	if p.DiskMB == 0 {
		p.DiskMB = c.Defaults.DiskMB
	}
	if p.Pids == 0 {
		p.Pids = c.Defaults.Pids
	}
	if p.Egress == "" {
		p.Egress = "none"
	}
	return p
}

// ResolvePool fills p's defaults from the config and checks it as a
// [[pool]] is checked: a warm pool from elsewhere (a cluster's
// AgentboxWarmPool). key names it in errors.
func (c Config) ResolvePool(key string, p WarmPool) (WarmPool, error) {
	var v validator
	p = c.withDefaults(p)
	c.validatePool(&v, key, p)
	return p, v.err()
}

// PoolKey is what makes two pools the same pool: everything but the size.
func PoolKey(p WarmPool) string {
	return fmt.Sprintf("%s/%s/%g/%d/%d/%d/%s/%s/%t", p.Template, p.Isolation, p.CPU, p.MemoryMB, p.DiskMB, p.Pids, p.Egress, p.Code, p.Desktop)
}

func (c Config) validatePools(v *validator) {
	seen := map[string]int{}
	for i, p := range c.WarmPools() {
		key := fmt.Sprintf("pool[%d]", i)
		c.validatePool(v, key, p)
		id := PoolKey(p)
		if j, dup := seen[id]; dup {
			v.addf("%s repeats pool[%d] (same template, isolation, limits, egress, code and desktop); raise that one's size instead", key, j)
		}
		seen[id] = i
	}
}

// validatePool adds pool p's problems to v; key names it.
func (c Config) validatePool(v *validator, key string, p WarmPool) {
	if p.Template != "" {
		v.name(key+".template", p.Template)
	}
	if p.Isolation != "" {
		v.name(key+".isolation", p.Isolation)
	}
	if p.Size < 1 || p.Size > maxPoolSize {
		v.addf("%s.size must be between 1 and %d, got %d", key, maxPoolSize, p.Size)
	}
	if p.CPU < minCPU || (c.Limits.CPU > 0 && p.CPU > c.Limits.CPU) {
		v.addf("%s.cpu must be between %g and limits.cpu (%g), got %g", key, minCPU, c.Limits.CPU, p.CPU)
	}
	if p.MemoryMB < minMemoryMB || p.MemoryMB > c.Limits.MemoryMB {
		v.addf("%s.memory_mb must be between %d and limits.memory_mb (%d), got %d", key, minMemoryMB, c.Limits.MemoryMB, p.MemoryMB)
	}
	if p.DiskMB < minDiskMB || p.DiskMB > c.Limits.DiskMB {
		v.addf("%s.disk_mb must be between %d and limits.disk_mb (%d), got %d", key, minDiskMB, c.Limits.DiskMB, p.DiskMB)
	}
	if p.Pids < minPids || p.Pids > c.Limits.Pids {
		v.addf("%s.pids must be between %d and limits.pids (%d), got %d", key, minPids, c.Limits.Pids, p.Pids)
	}
	if p.Egress != "none" && p.Egress != "internet" {
		v.addf("%s.egress must be \"none\" or \"internet\", got %q", key, p.Egress)
	}
	if p.Code != "" {
		v.name(key+".code", p.Code)
	}
}
