// Package config holds the daemon's settings: one TOML file, by default
// /etc/agentbox/config.toml, where every knob is optional and documented.
// A missing file means the embedded defaults, so `agentbox serve` works
// with no configuration at all. docs/config.md is the reference and
// docs/agentbox.example.toml is the same content as a ready-to-edit file;
// a test keeps the three in step.
package config

import (
	"path/filepath"
	"runtime"
	"time"
)

// DefaultPath is where the daemon looks for its config file.
const DefaultPath = "/etc/agentbox/config.toml"

// Config is the daemon's configuration. Field comments give the TOML key
// and the default.
type Config struct {
	// Role (role) is what `agentbox serve` runs as: "node", the daemon
	// with sandboxes, or "gateway", a fleet gateway in front of nodes
	// (fleet.go, docs/cluster.md). Default "node".
	Role string `toml:"role"`
	// NodeID (node_id), on a node in a fleet: 3 characters of a-z and
	// 2-7, unique in the fleet, that start every sandbox and snapshot id
	// the node hands out, so that a gateway routes by id alone; "auto"
	// with [kubernetes] on: claimed through the cluster at the first
	// start and kept in data_dir/node_id. Default "" (12-character ids,
	// no fleet).
	NodeID string `toml:"node_id"`
	// DataDir (data_dir) holds state.db, admin.key, templates and the
	// storage pool. Default /var/lib/agentbox.
	DataDir string `toml:"data_dir"`
	// RunDir (run_dir) holds runtime files that do not survive a reboot:
	// per-sandbox sockets and driver state. Default /run/agentbox.
	RunDir string `toml:"run_dir"`
	// Socket (socket) is the root-only unix socket the API listens on.
	// Default /run/agentbox/agentbox.sock.
	Socket string `toml:"socket"`
	// Listen (listen) is the TCP address of the API; "" disables TCP.
	// Default "127.0.0.1:7423".
	Listen string `toml:"listen"`
	// LogLevel (log_level) is one of debug, info, warn, error. Default info.
	LogLevel string `toml:"log_level"`
	// DefaultIsolation (default_isolation) is the isolation tier of a
	// sandbox whose request names none. Default "container".
	DefaultIsolation string `toml:"default_isolation"`
	// DefaultTemplate (default_template) is the template of a sandbox whose
	// request names none. Default "base".
	DefaultTemplate string `toml:"default_template"`
	// GuestBinary (guest_binary) is the host path of the static guest
	// agent. "" means: agentbox-guest next to the agentbox binary, then
	// /usr/local/lib/agentbox/agentbox-guest (see ResolveGuestBinary).
	GuestBinary string `toml:"guest_binary"`
	// UIDBase and UIDCount (uid_base, uid_count): sandbox uids
	// 0..UIDCount-1 map to host uids UIDBase..UIDBase+UIDCount-1.
	// Defaults 1000000 and 65536.
	UIDBase  int `toml:"uid_base"`
	UIDCount int `toml:"uid_count"`
	// UIDRanges (uid_ranges): how many sandbox ranges of UIDCount ids
	// follow the canonical one; each sandbox runs in one of its own
	// (internal/idrange). 0: every sandbox in the canonical range.
	UIDRanges int `toml:"uid_ranges"`
	// CgroupParent (cgroup_parent) is the cgroup, relative to each
	// hierarchy's root, under which sandboxes get their own. Default
	// "agentbox".
	CgroupParent string `toml:"cgroup_parent"`
	// CgroupFavorDynmods (cgroup_favordynmods): remount the host's cgroup2
	// mount with favordynmods at start, so that moving processes between
	// cgroups (every sandbox start and exec) does not wait for an RCU
	// grace period (internal/daemon/favordynmods_linux.go). Default true.
	CgroupFavorDynmods bool `toml:"cgroup_favordynmods"`
	// PrespawnInits (prespawn_inits) is how many container-tier sandbox
	// inits the daemon keeps started ahead of a create, waiting for their
	// sandbox (drivers/container/prespawn_linux.go). Default 2.
	PrespawnInits int `toml:"prespawn_inits"`
	// LxcfsDir (lxcfs_dir) is where LXCFS serves the per-sandbox views of
	// /proc/meminfo, uptime, swaps, loadavg, cpuinfo, stat and
	// /sys/devices/system/cpu/online that container-tier sandboxes see
	// (docs/sandbox-view.md); the daemon starts lxcfs there when nothing
	// is mounted (at lxcfs_dir.cfs beside one without --enable-cfs). "" turns the views off. Default
	// "/var/lib/lxcfs", where Debian's lxcfs.service mounts it.
	LxcfsDir string `toml:"lxcfs_dir"`
	// GvisorMemoryView (gvisor_memory_view) is obsolete: gvisor
	// sandboxes always show their CPU count and memory
	// (docs/sandbox-view.md, "gvisor"). Accepted, with a warning, so
	// that configuration files that set it still load.
	GvisorMemoryView bool `toml:"gvisor_memory_view"`
	// StorageSizeGB (storage_size_gb) is the size of the sparse loop file
	// backing the btrfs storage pool. Default 64.
	StorageSizeGB int64 `toml:"storage_size_gb"`
	// ReapInterval (reap_interval) is how often the daemon looks for
	// sandboxes past their TTL. Default "1s".
	ReapInterval time.Duration `toml:"reap_interval"`
	// MaxRequestBodyMB (max_request_body_mb) caps JSON request bodies
	// (file uploads are limited separately). Default 1.
	MaxRequestBodyMB int64 `toml:"max_request_body_mb"`
	// MaxDownloadMB (max_download_mb) caps what one file or archive
	// download from a sandbox may hold: 0 (the default) is the sandbox's
	// disk limit, -1 no limit.
	MaxDownloadMB int64 `toml:"max_download_mb"`

	// Defaults ([defaults]) apply to a sandbox whose request leaves a
	// field unset.
	Defaults Sandbox `toml:"defaults"`
	// Limits ([limits]) are the largest values a request may ask for.
	Limits Sandbox `toml:"limits"`
	// Security ([security]) is TLS and the API's abuse limits (security.go).
	Security Security `toml:"security"`
	// Network ([network]) configures networking and preview URLs
	// (network.go).
	Network Network `toml:"network"`
	// Pools ([[pool]], pool.go) are the warm pools: sandboxes created
	// ahead of time and handed out on create. None by default.
	Pools []WarmPool `toml:"pool"`
	// Metrics ([metrics], metrics.go) is GET /metrics and the usage
	// samples.
	Metrics Metrics `toml:"metrics"`
	// E2B ([e2b], e2b.go) is the E2B-compatible API.
	E2B E2B `toml:"e2b"`
	// Tracing ([tracing], tracing.go) is OpenTelemetry traces over OTLP.
	Tracing Tracing `toml:"tracing"`
	// Registry ([registry], registry.go) is how templates and snapshots
	// reach OCI registries.
	Registry Registry `toml:"registry"`
	// Fleet ([fleet], fleet.go) joins nodes behind a gateway.
	Fleet Fleet `toml:"fleet"`
	// Kubernetes ([kubernetes], kubernetes.go) takes the fleet's
	// membership from a cluster.
	Kubernetes Kubernetes `toml:"kubernetes"`
}

// Sandbox is a set of per-sandbox settings, used both for the defaults and
// for the limits.
type Sandbox struct {
	// TTL (ttl) is the wall-clock lifetime. Defaults 10m / 24h; a limit
	// of 0 means none (a sandbox may then have no TTL).
	TTL time.Duration `toml:"ttl"`
	// CPU (cpu) in cores. Defaults 1 / the host's CPU count. In [limits],
	// 0 means the host's CPU count.
	CPU float64 `toml:"cpu"`
	// MemoryMB (memory_mb). Defaults 512 / 16384.
	MemoryMB int64 `toml:"memory_mb"`
	// DiskMB (disk_mb) is the hard limit on the sandbox's writable layer.
	// Defaults 1024 / 102400.
	DiskMB int64 `toml:"disk_mb"`
	// Pids (pids) caps processes and threads. Defaults 512 / 32768.
	Pids int64 `toml:"pids"`
}

// Default returns the embedded defaults; they pass Validate.
func Default() Config {
	return Config{
		Role:             RoleNode,
		Fleet:            Fleet{PollInterval: time.Second, Candidates: 3},
		Kubernetes:       Kubernetes{LeaseDuration: 40 * time.Second},
		DataDir:          "/var/lib/agentbox",
		RunDir:           "/run/agentbox",
		Socket:           "/run/agentbox/agentbox.sock",
		Listen:           "127.0.0.1:7423",
		LogLevel:         "info",
		DefaultIsolation: "container",
		DefaultTemplate:  "base",
		GuestBinary:      "",
		UIDBase:          1000000,
		UIDCount:         65536,
		UIDRanges:        16384,
		CgroupParent:     "agentbox",
		StorageSizeGB:    64,
		ReapInterval:     time.Second,
		MaxRequestBodyMB: 1,
		Security:         Security{RateLimit: 50, RateBurst: 200},
		Network:          Network{PreviewDomain: "localhost", Pool: "10.200.0.0/16", MaxConnections: 1024},

		// Cheap cgroup migrations (internal/daemon/favordynmods_linux.go).
		CgroupFavorDynmods: true,
		PrespawnInits:      2,
		LxcfsDir:           "/var/lib/lxcfs",
		Metrics:            Metrics{UsageInterval: 5 * time.Second},
		Tracing:            Tracing{SampleRatio: 1},
		Registry:           Registry{Insecure: []string{}, TenantRegistries: []string{}},
		E2B:                E2B{TemplateAliases: map[string]string{"code-interpreter-v1": "python"}},

		Defaults: Sandbox{
			TTL:      10 * time.Minute,
			CPU:      1,
			MemoryMB: 512,
			DiskMB:   1024,
			Pids:     512,
		},
		Limits: Sandbox{
			TTL:      24 * time.Hour,
			CPU:      hostCPUs(),
			MemoryMB: 16384,
			DiskMB:   102400,
			Pids:     32768,
		},
	}
}

func hostCPUs() float64 { return float64(runtime.NumCPU()) }

// StatePath is the SQLite state file, <DataDir>/state.db.
func (c Config) StatePath() string { return filepath.Join(c.DataDir, "state.db") }

// AdminKeyPath is the file holding the admin API key, <DataDir>/admin.key.
func (c Config) AdminKeyPath() string { return filepath.Join(c.DataDir, "admin.key") }

// MaxRequestBodyBytes is MaxRequestBodyMB in bytes.
func (c Config) MaxRequestBodyBytes() int64 { return c.MaxRequestBodyMB << 20 }
