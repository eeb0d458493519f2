// Package api holds the JSON types of agentbox's HTTP API (specified in
// api/openapi.yaml) and of the guest protocol spoken between the daemon and
// the guest agent. It is a leaf package: it imports only the standard
// library, so the guest agent, the daemon and the Go SDK all share it.
package api

import (
	"fmt"
	"time"
)

// Sandbox states.
const (
	StateCreating   = "creating"
	StateRunning    = "running"
	StatePaused     = "paused"
	StateStopped    = "stopped"
	StateDestroying = "destroying"
	StateDestroyed  = "destroyed"
	StateFailed     = "failed"
)

// CreateSandboxRequest is the body of POST /v1/sandboxes.
type CreateSandboxRequest struct {
	Template   string            `json:"template,omitempty"`    // default "base"
	Isolation  string            `json:"isolation,omitempty"`   // default from config ("container")
	TTLSeconds int64             `json:"ttl_seconds,omitempty"` // 0: config default; -1: no TTL
	CPU        float64           `json:"cpu,omitempty"`         // cores, e.g. 0.5, 2
	MemoryMB   int64             `json:"memory_mb,omitempty"`
	DiskMB     int64             `json:"disk_mb,omitempty"`
	Pids       int64             `json:"pids,omitempty"`
	Env        map[string]string `json:"env,omitempty"`
	Metadata   map[string]string `json:"metadata,omitempty"`
	// Snapshot starts the sandbox from a snapshot (id or name) instead of
	// a template; see api/state.go.
	Snapshot string `json:"snapshot,omitempty"`
	// OnTimeout is what the TTL does: OnTimeoutDestroy (default) or
	// OnTimeoutPause, which keeps the sandbox paused and its files.
	OnTimeout string `json:"on_timeout,omitempty"`
	// AutoResume makes exec and file requests resume a paused sandbox
	// instead of failing.
	AutoResume bool `json:"auto_resume,omitempty"`
	// IdleTimeoutSeconds applies OnTimeout once the sandbox has had no API
	// activity (exec, files, processes, PTY, preview traffic) for that
	// many seconds; 0: no idle timeout. See docs/state.md.
	IdleTimeoutSeconds int64 `json:"idle_timeout,omitempty"`
	// Network is the egress policy and preview access (api/network.go).
	Network *Network `json:"network,omitempty"`
	// UserLimits are the per-user kernel counts of the sandbox's
	// processes; a field left 0 takes the template's value, or the
	// default (DefaultUserLimits).
	UserLimits *UserLimits `json:"user_limits,omitempty"`
	// Node, through a fleet gateway, places the sandbox on that node (its
	// node_id) instead of the best of a few (docs/cluster.md); a node
	// refuses a create naming another node.
	Node string `json:"node,omitempty"`
}

// UserLimits are the counts the kernel keeps per user, bounded per
// sandbox so that none takes them from its neighbours or the host (see
// docs/SECURITY.md, "Shared kernel resources"). On the container tier
// they are the limits of the sandbox's own user namespace and the rlimits
// of its processes; on microvm the guest kernel's; on gvisor the rlimits
// (gVisor's kernel keeps its own inotify counts). 0 in a request: the
// template's value, or the default.
type UserLimits struct {
	// InotifyInstances is fs.inotify.max_user_instances: inotify_init
	// calls per uid (each file watcher takes one).
	InotifyInstances int64 `json:"inotify_instances,omitempty"`
	// InotifyWatches is fs.inotify.max_user_watches: watched files and
	// directories per uid (a dev server's watcher takes one per directory
	// of the tree it watches).
	InotifyWatches int64 `json:"inotify_watches,omitempty"`
	// MsgqueueBytes is RLIMIT_MSGQUEUE: bytes of POSIX message queues per
	// uid.
	MsgqueueBytes int64 `json:"msgqueue_bytes,omitempty"`
	// Sigpending is RLIMIT_SIGPENDING: signals queued per uid.
	Sigpending int64 `json:"sigpending,omitempty"`
}

// DefaultUserLimits and MaxUserLimits bound UserLimits: the defaults
// suit a dev server's file watcher on a large tree; the ceilings keep a
// sandbox's take (the kernel memory behind it is charged to the sandbox's
// memory limit) from the host's per-user figures.
var (
	DefaultUserLimits = UserLimits{InotifyInstances: 128, InotifyWatches: 65536, MsgqueueBytes: 102400, Sigpending: 4096}
	MaxUserLimits     = UserLimits{InotifyInstances: 1024, InotifyWatches: 1 << 20, MsgqueueBytes: 819200, Sigpending: 65536}
)

// Check refuses a negative field or one above MaxUserLimits (0 is "the
// default"), naming it as what.FIELD and saying what may be sent.
func (l *UserLimits) Check(what string) error {
	for _, f := range l.fields() {
		if f.v < 0 || f.v > f.max {
			return fmt.Errorf("%s.%s must be between 1 and %d (0 or absent: the default), got %d", what, f.name, f.max, f.v)
		}
	}
	return nil
}

// Over returns l with each field that o sets (non-zero) taken from o.
func (l UserLimits) Over(o *UserLimits) UserLimits {
	if o == nil {
		return l
	}
	for _, p := range []struct{ dst, v *int64 }{
		{&l.InotifyInstances, &o.InotifyInstances}, {&l.InotifyWatches, &o.InotifyWatches},
		{&l.MsgqueueBytes, &o.MsgqueueBytes}, {&l.Sigpending, &o.Sigpending},
	} {
		if *p.v != 0 {
			*p.dst = *p.v
		}
	}
	return l
}

type userLimitField struct {
	name   string
	v, max int64
}

func (l *UserLimits) fields() []userLimitField {
	m := MaxUserLimits
	return []userLimitField{
		{"inotify_instances", l.InotifyInstances, m.InotifyInstances},
		{"inotify_watches", l.InotifyWatches, m.InotifyWatches},
		{"msgqueue_bytes", l.MsgqueueBytes, m.MsgqueueBytes},
		{"sigpending", l.Sigpending, m.Sigpending},
	}
}

// SetUserLimit sets the field named name (inotify_instances,
// inotify_watches, msgqueue_bytes or sigpending) to v: the CLI's
// --user-limit NAME=N and the build spec's user_limits step.
func (l *UserLimits) SetUserLimit(name string, v int64) error {
	switch name {
	case "inotify_instances":
		l.InotifyInstances = v
	case "inotify_watches":
		l.InotifyWatches = v
	case "msgqueue_bytes":
		l.MsgqueueBytes = v
	case "sigpending":
		l.Sigpending = v
	default:
		return fmt.Errorf("unknown user limit %q: use inotify_instances, inotify_watches, msgqueue_bytes or sigpending", name)
	}
	return nil
}

// Resources are a sandbox's limits, as applied.
type Resources struct {
	CPU      float64 `json:"cpu"`
	MemoryMB int64   `json:"memory_mb"`
	DiskMB   int64   `json:"disk_mb"`
	Pids     int64   `json:"pids"`
}

// Sandbox is what the API shows of a sandbox.
type Sandbox struct {
	ID string `json:"id"`
	// Node is the node_id of the daemon that runs the sandbox, the first
	// three characters of its id ("" on a daemon without node_id;
	// docs/cluster.md).
	Node            string            `json:"node,omitempty"`
	State           string            `json:"state"`
	Template        string            `json:"template"`
	TemplateVersion string            `json:"template_version"`
	Isolation       string            `json:"isolation"`
	Resources       Resources         `json:"resources"`
	Env             map[string]string `json:"env,omitempty"`
	Metadata        map[string]string `json:"metadata,omitempty"`
	CreatedAt       time.Time         `json:"created_at"`
	ExpiresAt       *time.Time        `json:"expires_at,omitempty"`
	Error           string            `json:"error,omitempty"` // why it failed, when state is failed
	Pid             int               `json:"pid,omitempty"`   // host pid of the sandbox's init (admin view)
	// UIDBase is the first host uid of the sandbox's own uid range, 0 for
	// the shared one (uid_base); for the daemon's posture check, not
	// sent (`agentbox inspect --security` shows it).
	UIDBase int `json:"-"`
	// Accelerator is the microvm tier's: "kvm", or "tcg" (QEMU's software
	// emulation, on hosts without /dev/kvm); empty on the other tiers.
	Accelerator string `json:"accelerator,omitempty"`
	// Lineage: the sandbox this one was forked from, and the snapshot it
	// started from.
	Parent     string `json:"parent,omitempty"`
	Snapshot   string `json:"snapshot,omitempty"`
	OnTimeout  string `json:"on_timeout,omitempty"`
	AutoResume bool   `json:"auto_resume,omitempty"`
	// IdleTimeoutSeconds is the create request's idle_timeout (0: none).
	IdleTimeoutSeconds int64 `json:"idle_timeout,omitempty"`
	// Network is the sandbox's network settings, its preview token
	// included (api/network.go).
	Network *Network `json:"network,omitempty"`
	// UserLimits are the per-user kernel counts as applied, every field
	// filled in.
	UserLimits *UserLimits `json:"user_limits,omitempty"`
	// PausedToDisk: paused with its processes and memory checkpointed to
	// disk (gvisor tier); resume restores them.
	PausedToDisk bool `json:"paused_to_disk,omitempty"`
	// OOMKills is how many processes the kernel's OOM killer has killed
	// in the running sandbox (at its memory limit) since it started, and
	// LastOOMAt when the daemon's usage sampler (every few seconds) first
	// saw the latest; only GET /v1/sandboxes/{id} fills them in.
	OOMKills  int64      `json:"oom_kills,omitempty"`
	LastOOMAt *time.Time `json:"last_oom_at,omitempty"`
}

// UpdateSandboxRequest is the body of PATCH /v1/sandboxes/{id}.
type UpdateSandboxRequest struct {
	// TTLSeconds, when set, makes the sandbox expire that many seconds from
	// now; -1 removes the TTL.
	TTLSeconds *int64 `json:"ttl_seconds,omitempty"`
}

// ListSandboxesResponse is the body of GET /v1/sandboxes.
type ListSandboxesResponse struct {
	Sandboxes []Sandbox `json:"sandboxes"`
	// NextCursor, on a page asked for with limit, is the cursor of the
	// next page: pass it as cursor= with the same limit and filters. It is
	// empty on the last page.
	NextCursor string `json:"next_cursor,omitempty"`
}

// Template is what the API shows of a template.
type Template struct {
	Name      string            `json:"name"`
	Version   string            `json:"version"`
	User      string            `json:"user,omitempty"`
	Workdir   string            `json:"workdir,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cmd       []string          `json:"cmd,omitempty"`    // an imported image's entrypoint + cmd
	Source    string            `json:"source,omitempty"` // "rootfs DIR" or "image FILE@DIGEST"
	SizeBytes int64             `json:"size_bytes"`
	CreatedAt time.Time         `json:"created_at"`
	// Tenant owns the template (only it and the admin see it); empty for
	// a public template, made with an admin key.
	Tenant string `json:"tenant,omitempty"`
	// MemoryMB is the memory limit of sandboxes that ask for none (the
	// daemon's default otherwise), e.g. 2048 for the desktop template.
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// UserLimits are the per-user kernel counts of sandboxes that ask for
	// none (the daemon's defaults for fields left 0).
	UserLimits *UserLimits `json:"user_limits,omitempty"`
	// Built templates (see build.go): the template version this one
	// stacks on (NAME@VERSION), its own layers (top first), the start
	// command of every new sandbox and the readiness check create waits for.
	From   string      `json:"from,omitempty"`
	Layers []string    `json:"layers,omitempty"`
	Start  string      `json:"start,omitempty"`
	Ready  *ReadyCheck `json:"ready,omitempty"`
	// Versions lists every version, oldest first, and LayerInfo what made
	// each of Layers (GET /v1/templates/{name} only).
	Versions  []string        `json:"versions,omitempty"`
	LayerInfo []TemplateLayer `json:"layer_info,omitempty"`
	// Nodes, in a fleet gateway's answer, are the nodes that hold the
	// template (docs/cluster.md); a node's own answer leaves it out.
	Nodes []string `json:"nodes,omitempty"`
}

// ImportTemplateRequest is the body of POST /v1/templates (admin only): the
// daemon copies a root filesystem directory on its own host into a new
// template version.
type ImportTemplateRequest struct {
	Name   string `json:"name"`
	Rootfs string `json:"rootfs,omitempty"` // a directory on the daemon's host
	// Image, instead of Rootfs: a docker-archive or OCI layout (directory
	// or tar) on the daemon's host; its config gives the defaults, which
	// User, Workdir and Env override. See docs/templates.md.
	Image   string            `json:"image,omitempty"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// MemoryMB is the template's default memory limit (0: the daemon's).
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// UserLimits are the template's defaults of its sandboxes' per-user
	// kernel counts (fields left 0: the daemon's).
	UserLimits *UserLimits `json:"user_limits,omitempty"`
}

// ListTemplatesResponse is the body of GET /v1/templates.
type ListTemplatesResponse struct {
	Templates []Template `json:"templates"`
}

// ErrorBody is the body of every error response.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail carries a stable code (see package errdefs) and a message
// that says what was wrong and what to do.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// RequestID is the request's X-Request-Id, which its log line on
	// the daemon carries too.
	RequestID string `json:"request_id,omitempty"`
}

// ExecRequest runs a command. Exactly one of Cmd (an argv, run directly) and
// Shell (a string run by /bin/sh -c) is set. Used by
// POST /v1/sandboxes/{id}/exec and by the guest's POST /exec.
type ExecRequest struct {
	Cmd       []string          `json:"cmd,omitempty"`
	Shell     string            `json:"shell,omitempty"`
	Env       map[string]string `json:"env,omitempty"`
	Cwd       string            `json:"cwd,omitempty"`
	User      string            `json:"user,omitempty"` // name or uid; default: the template's user
	TimeoutMs int64             `json:"timeout_ms,omitempty"`
	// Stdin is the whole standard input, for a non-streaming exec.
	Stdin []byte `json:"stdin,omitempty"`
	// StdinStream says that StdinFrame lines follow the request line in a
	// streaming exec's NDJSON body; without it stdin is empty (or Stdin).
	StdinStream bool `json:"stdin_stream,omitempty"`
	// MaxOutputBytes caps stdout and stderr each; 0 means the default
	// (16 MiB for a buffered exec, unlimited for a streaming one, where the
	// client holds the data). Output past the cap is dropped, the process
	// keeps running, and Truncated is set.
	MaxOutputBytes int64 `json:"max_output_bytes,omitempty"`
}

// StdinFrame is one line of a streaming exec's request body after the
// ExecRequest line.
type StdinFrame struct {
	Data []byte `json:"data,omitempty"`
	EOF  bool   `json:"eof,omitempty"`
}

// Exec event types, in a streaming exec's NDJSON response.
const (
	EventStart     = "start"
	EventStdout    = "stdout"
	EventStderr    = "stderr"
	EventExit      = "exit"
	EventKeepalive = "keepalive"
	EventError     = "error"
)

// ExecEvent is one line of a streaming exec's response. The stream ends
// with exactly one exit or error event.
type ExecEvent struct {
	Type string `json:"type"`
	Pid  int    `json:"pid,omitempty"`  // start
	Data []byte `json:"data,omitempty"` // stdout, stderr (base64 in JSON)
	// Offset is, on a background process's stream, the byte offset of
	// Data's first byte in its stream (see ProcessOutput).
	Offset *int64 `json:"offset,omitempty"`
	// Time is, on a background process's stream asked with chunks=true,
	// when Data was read from the process (see OutputChunk).
	Time *time.Time `json:"time,omitempty"`
	// exit:
	ExitCode   *int    `json:"exit_code,omitempty"`
	Signal     string  `json:"signal,omitempty"` // e.g. "SIGKILL" when killed by a signal
	TimedOut   bool    `json:"timed_out,omitempty"`
	OOMKilled  bool    `json:"oom_killed,omitempty"`
	Truncated  bool    `json:"truncated,omitempty"`
	DurationMs float64 `json:"duration_ms,omitempty"`
	// error:
	Error *ErrorDetail `json:"error,omitempty"`
}

// ExecResult is the response of a buffered (non-streaming) exec. Stdout and
// Stderr are UTF-8 text; where the output was not valid UTF-8 they hold
// base64 and Encoding is "base64".
type ExecResult struct {
	Stdout     string  `json:"stdout"`
	Stderr     string  `json:"stderr"`
	Encoding   string  `json:"encoding,omitempty"`
	ExitCode   int     `json:"exit_code"`
	Signal     string  `json:"signal,omitempty"`
	TimedOut   bool    `json:"timed_out,omitempty"`
	Truncated  bool    `json:"truncated,omitempty"`
	DurationMs float64 `json:"duration_ms"`
	// OOMKilled: the kernel's OOM killer ended the command (or the process
	// it waited for) at the sandbox's memory limit; ExitCode is then 137.
	OOMKilled bool `json:"oom_killed,omitempty"`
}

// File types in FileInfo.Type.
const (
	FileTypeFile    = "file"
	FileTypeDir     = "dir"
	FileTypeSymlink = "symlink"
	FileTypeOther   = "other"
)

// FileInfo describes one file inside a sandbox.
type FileInfo struct {
	Name    string    `json:"name"`
	Path    string    `json:"path"`
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // octal permission bits, e.g. "0644"
	ModTime time.Time `json:"mtime"`
	Target  string    `json:"target,omitempty"` // symlink target
	UID     int       `json:"uid"`
	GID     int       `json:"gid"`
}

// ListFilesResponse is the body of GET .../files/list.
type ListFilesResponse struct {
	Entries []FileInfo `json:"entries"`
}

// MkdirRequest is the body of POST .../files/mkdir.
type MkdirRequest struct {
	Path string `json:"path"`
	Mode string `json:"mode,omitempty"` // octal, default "0755"
	User string `json:"user,omitempty"`
}

// RenameRequest is the body of POST .../files/rename.
type RenameRequest struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status    string   `json:"status"`
	Version   string   `json:"version"`
	Drivers   []string `json:"drivers"`
	Sandboxes int      `json:"sandboxes"`
}
