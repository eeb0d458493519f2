package config

import (
	"fmt"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Bounds that no configuration may cross.
const (
	minMemoryMB     = 64
	minDiskMB       = 64
	minPids         = 8
	minCPU          = 0.01
	minTTL          = time.Second
	minReapInterval = 10 * time.Millisecond
	maxReapInterval = time.Minute
	// minUIDBase keeps sandbox uids clear of the host's own users.
	minUIDBase = 65536
	maxID      = 1<<32 - 2 // the largest valid uid, excluding (uid_t)-1
)

var logLevels = []string{"debug", "info", "warn", "error"}

// Validate checks every field and returns all problems at once, each
// message naming the TOML key and what to do. The error wraps
// errdefs.ErrInvalidArgument.
func (c Config) Validate() error {
	var v validator
	v.absPath("data_dir", c.DataDir)
	v.absPath("run_dir", c.RunDir)
	v.absPath("socket", c.Socket)
	if c.Listen != "" {
		host, port, err := net.SplitHostPort(c.Listen)
		if err != nil {
			v.addf("listen must be host:port such as \"127.0.0.1:7423\", or \"\" to disable TCP, got %q", c.Listen)
		} else if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
			v.addf("listen port must be a number between 0 and 65535, got %q", port)
		} else if host != "" && net.ParseIP(host) == nil && strings.ContainsAny(host, " /") {
			v.addf("listen host must be an IP address or host name, got %q", host)
		}
	}
	if !contains(logLevels, c.LogLevel) {
		v.addf("log_level must be one of %s, got %q", strings.Join(logLevels, ", "), c.LogLevel)
	}
	v.name("default_isolation", c.DefaultIsolation)
	v.name("default_template", c.DefaultTemplate)
	if c.GuestBinary != "" && !filepath.IsAbs(c.GuestBinary) {
		v.addf("guest_binary must be an absolute path or \"\" to search the default places, got %q", c.GuestBinary)
	}
	if c.UIDBase < minUIDBase {
		v.addf("uid_base must be >= %d so that sandbox uids never collide with host users, got %d", minUIDBase, c.UIDBase)
	}
	if c.UIDCount < 1 {
		v.addf("uid_count must be >= 1 (65536 gives sandboxes the full uid range), got %d", c.UIDCount)
	}
	if c.UIDBase >= minUIDBase && c.UIDCount >= 1 && int64(c.UIDBase)+int64(c.UIDCount)-1 > maxID {
		v.addf("uid_base + uid_count - 1 must be <= %d, got %d", int64(maxID), int64(c.UIDBase)+int64(c.UIDCount)-1)
	}
	if c.UIDRanges < 0 {
		v.addf("uid_ranges must be >= 0 (0 runs every sandbox in the one range uid_base..), got %d", c.UIDRanges)
	} else if c.UIDBase >= minUIDBase && c.UIDCount >= 1 && c.UIDRanges > 0 && int64(c.UIDBase)+int64(c.UIDRanges+1)*int64(c.UIDCount)-1 > maxID {
		v.addf("uid_base + (uid_ranges + 1) x uid_count - 1 must be <= %d, got %d; lower uid_ranges", int64(maxID), int64(c.UIDBase)+int64(c.UIDRanges+1)*int64(c.UIDCount)-1)
	}
	if c.CgroupParent == "" || filepath.IsAbs(c.CgroupParent) || filepath.Clean(c.CgroupParent) != c.CgroupParent ||
		c.CgroupParent == ".." || strings.HasPrefix(c.CgroupParent, "../") {
		v.addf("cgroup_parent must be a clean relative cgroup path such as \"agentbox\", got %q", c.CgroupParent)
	}
	if c.StorageSizeGB < 1 {
		v.addf("storage_size_gb must be >= 1, got %d", c.StorageSizeGB)
	}
	if c.ReapInterval < minReapInterval || c.ReapInterval > maxReapInterval {
		v.addf("reap_interval must be between %s and %s, got %s", minReapInterval, fmtDuration(maxReapInterval), c.ReapInterval)
	}
	if c.PrespawnInits < 0 || c.PrespawnInits > 64 {
		v.addf("prespawn_inits must be between 0 and 64, got %d", c.PrespawnInits)
	}
	if c.MaxDownloadMB < -1 {
		v.addf("max_download_mb must be -1 (no limit), 0 (the sandbox's disk limit) or a number of MB, got %d", c.MaxDownloadMB)
	}
	if c.MaxRequestBodyMB < 1 || c.MaxRequestBodyMB > 1024 {
		v.addf("max_request_body_mb must be between 1 and 1024, got %d", c.MaxRequestBodyMB)
	}

	d, l := c.Defaults, c.Limits
	if d.TTL < minTTL {
		v.addf("defaults.ttl must be >= %s, got %s", minTTL, d.TTL)
	}
	if d.CPU < minCPU {
		v.addf("defaults.cpu must be >= %g, got %g", minCPU, d.CPU)
	}
	if d.MemoryMB < minMemoryMB {
		v.addf("defaults.memory_mb must be >= %d, got %d", minMemoryMB, d.MemoryMB)
	}
	if d.DiskMB < minDiskMB {
		v.addf("defaults.disk_mb must be >= %d, got %d", minDiskMB, d.DiskMB)
	}
	if d.Pids < minPids {
		v.addf("defaults.pids must be >= %d, got %d", minPids, d.Pids)
	}
	if l.TTL != 0 && l.TTL < d.TTL { // 0: no limit
		v.addf("limits.ttl must be >= defaults.ttl (%s), got %s", fmtDuration(d.TTL), fmtDuration(l.TTL))
	}
	if l.CPU < d.CPU {
		v.addf("limits.cpu must be >= defaults.cpu (%g), got %g", d.CPU, l.CPU)
	}
	if l.MemoryMB < d.MemoryMB {
		v.addf("limits.memory_mb must be >= defaults.memory_mb (%d), got %d", d.MemoryMB, l.MemoryMB)
	}
	if l.DiskMB < d.DiskMB {
		v.addf("limits.disk_mb must be >= defaults.disk_mb (%d), got %d", d.DiskMB, l.DiskMB)
	}
	if l.Pids < d.Pids {
		v.addf("limits.pids must be >= defaults.pids (%d), got %d", d.Pids, l.Pids)
	}
	c.validateSecurity(&v)
	c.validateNetworkLimits(&v)
	c.validatePools(&v)
	c.validateMetrics(&v)
	c.validateE2B(&v)
	c.validateTracing(&v)
	c.validateRegistry(&v)
	c.validateFleet(&v)
	c.validateKubernetes(&v)
	return v.err()
}

type validator struct{ problems []string }

func (v *validator) addf(format string, args ...any) {
	v.problems = append(v.problems, fmt.Sprintf(format, args...))
}

func (v *validator) absPath(key, p string) {
	if p == "" || !filepath.IsAbs(p) {
		v.addf("%s must be an absolute path, got %q", key, p)
	}
}

// name checks a template or isolation name: lowercase letters, digits, '-',
// '_' and '.', starting with a letter or digit.
func (v *validator) name(key, s string) {
	ok := s != "" && len(s) <= 64
	for i, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
		case i > 0 && (r == '-' || r == '_' || r == '.'):
		default:
			ok = false
		}
	}
	if !ok {
		v.addf("%s must be a name of lowercase letters, digits, '-', '_' and '.', got %q", key, s)
	}
}

func (v *validator) err() error {
	if len(v.problems) == 0 {
		return nil
	}
	return errdefs.Invalid("%s", strings.Join(v.problems, "; "))
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
