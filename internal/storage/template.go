package storage

import (
	"regexp"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// Template is one immutable version of a template: a read-only root
// filesystem and the defaults of sandboxes made from it.
type Template struct {
	Name    string `json:"name"`
	Version string `json:"version"` // "1", "2", ...: the import sequence number
	// Rootfs is the host directory of the root filesystem (the overlay's
	// lowerdir). Its files are owned by UIDBase + their uid in the sandbox.
	Rootfs  string            `json:"-"`
	User    string            `json:"user,omitempty"`
	Workdir string            `json:"workdir,omitempty"`
	Env     map[string]string `json:"env,omitempty"`
	// Cmd is the image's entrypoint + cmd, kept for reference (what
	// `docker run` would start); sandboxes start only the guest agent.
	Cmd []string `json:"cmd,omitempty"`
	// Source says where the rootfs came from: "rootfs DIR" or
	// "image FILE@sha256:...".
	Source    string    `json:"source,omitempty"`
	SizeBytes int64     `json:"size_bytes"`
	CreatedAt time.Time `json:"created_at"`
	// Digest is the manifest digest of the image this version was pulled
	// as from a registry ("" otherwise); Pushed (not in template.json,
	// read from <version>.pushed.json beside it) the refs it was pushed
	// to. Either names its files on another node (snapshot_oci_linux.go).
	Digest string      `json:"digest,omitempty"`
	Pushed []PushedRef `json:"-"`
	// UIDBase is the host uid that uid 0 of the rootfs is stored as.
	UIDBase int `json:"uid_base"`
	// Tenant owns the template: only it and the admin see and use it.
	// Empty for a public template (made with an admin key). Every version
	// of a name has the same owner; see owner.go.
	Tenant string `json:"tenant,omitempty"`
	// MemoryMB is the default memory limit of its sandboxes (0: the
	// daemon's).
	MemoryMB int64 `json:"memory_mb,omitempty"`
	// UserLimits are its sandboxes' default per-user kernel counts
	// (nil, or fields 0: the daemon's).
	UserLimits *api.UserLimits `json:"user_limits,omitempty"`
	// BuildInfo: set on templates made by a build spec (build_linux.go).
	BuildInfo
}

// PushedRef is a registry ref a template version was pushed to, and the
// manifest digest it was pushed as.
type PushedRef struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
}

// API returns what the HTTP API shows of t.
func (t *Template) API() api.Template {
	return api.Template{
		Name:       t.Name,
		Version:    t.Version,
		User:       t.User,
		Workdir:    t.Workdir,
		Env:        t.Env,
		Cmd:        t.Cmd,
		Source:     t.Source,
		SizeBytes:  t.SizeBytes,
		CreatedAt:  t.CreatedAt,
		Tenant:     t.Tenant,
		MemoryMB:   t.MemoryMB,
		UserLimits: t.UserLimits,
		From:       t.From,
		Layers:     t.Layers,
		Start:      t.Start,
		Ready:      t.Ready,
	}
}

var templateNameRe = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]{0,62}$`)

// ValidTemplateName reports, as an invalid-argument error, whether name
// can name a template.
func ValidTemplateName(name string) error {
	if !templateNameRe.MatchString(name) {
		return errdefs.Invalid("template name %q is not valid: use 1-63 lowercase letters, digits, '.', '_' or '-', starting with a letter or digit", name)
	}
	return nil
}

// checkUserLimits refuses a template's user_limits out of range.
func checkUserLimits(l *api.UserLimits) error {
	if l == nil {
		return nil
	}
	if err := l.Check("user_limits"); err != nil {
		return errdefs.Invalid("%v", err)
	}
	return nil
}

func templateNotFound(name string) error {
	return errdefs.NotFound("template %q not found; build it with scripts/build-template.sh %s or list templates with agentbox template ls", name, name)
}
