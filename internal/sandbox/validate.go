package sandbox

import (
	"fmt"
	"math"
	"regexp"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
)

var (
	envKeyRE  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	metaKeyRE = regexp.MustCompile(`^[A-Za-z0-9_.\-/]{1,63}$`)
)

// resolved is a create request with every default filled in and checked.
type resolved struct {
	Template  string
	Isolation string
	TTL       time.Duration // 0: none
	Res       api.Resources
	Env       map[string]string
	Metadata  map[string]string
}

// resolve fills defaults from cfg and checks every field against its
// limits, with messages that say what to send instead.
func resolve(cfg *config.Config, req *api.CreateSandboxRequest) (*resolved, error) {
	def, lim := cfg.Defaults, cfg.Limits
	r := &resolved{
		Template:  req.Template,
		Isolation: req.Isolation,
		Env:       req.Env,
		Metadata:  req.Metadata,
	}
	if r.Template == "" {
		r.Template = cfg.DefaultTemplate
	}
	if r.Isolation == "" {
		r.Isolation = cfg.DefaultIsolation
	}
	switch {
	case req.TTLSeconds == 0:
		r.TTL = def.TTL
	case req.TTLSeconds == -1:
		r.TTL = 0
	case req.TTLSeconds < 0:
		return nil, errdefs.Invalid("ttl_seconds must be positive, or -1 for no TTL, got %d", req.TTLSeconds)
	default:
		r.TTL = time.Duration(req.TTLSeconds) * time.Second
	}
	if err := checkTTLLimit(lim.TTL, r.TTL, req.TTLSeconds); err != nil {
		return nil, err
	}
	r.Res = api.Resources{CPU: req.CPU, MemoryMB: req.MemoryMB, DiskMB: req.DiskMB, Pids: req.Pids}
	if r.Res.CPU == 0 {
		r.Res.CPU = def.CPU
	}
	if r.Res.MemoryMB == 0 {
		r.Res.MemoryMB = def.MemoryMB
	}
	if r.Res.DiskMB == 0 {
		r.Res.DiskMB = def.DiskMB
	}
	if r.Res.Pids == 0 {
		r.Res.Pids = def.Pids
	}
	if math.IsNaN(r.Res.CPU) || r.Res.CPU < 0.01 || r.Res.CPU > lim.CPU {
		return nil, errdefs.Invalid("cpu must be between 0.01 and %g cores, got %g", lim.CPU, req.CPU)
	}
	if r.Res.MemoryMB < 16 || r.Res.MemoryMB > lim.MemoryMB {
		return nil, errdefs.Invalid("memory_mb must be between 16 and %d, got %d", lim.MemoryMB, req.MemoryMB)
	}
	if r.Res.DiskMB < 16 || r.Res.DiskMB > lim.DiskMB {
		return nil, errdefs.Invalid("disk_mb must be between 16 and %d, got %d", lim.DiskMB, req.DiskMB)
	}
	if r.Res.Pids < 8 || r.Res.Pids > lim.Pids {
		return nil, errdefs.Invalid("pids must be between 8 and %d, got %d", lim.Pids, req.Pids)
	}
	if len(r.Env) > 256 {
		return nil, errdefs.Invalid("env may hold at most 256 variables, got %d", len(r.Env))
	}
	for k, v := range r.Env {
		if !envKeyRE.MatchString(k) {
			return nil, errdefs.Invalid("env key %q is not a valid name: use letters, digits and _, not starting with a digit", k)
		}
		if len(v) > 32<<10 {
			return nil, errdefs.Invalid("env %s is %d bytes; values are limited to 32 KiB", k, len(v))
		}
	}
	if len(r.Metadata) > 64 {
		return nil, errdefs.Invalid("metadata may hold at most 64 pairs, got %d", len(r.Metadata))
	}
	for k, v := range r.Metadata {
		if !metaKeyRE.MatchString(k) {
			return nil, errdefs.Invalid("metadata key %q: use 1-63 letters, digits, '_', '.', '-' or '/'", k)
		}
		if len(v) > 1024 {
			return nil, errdefs.Invalid("metadata %s is %d bytes; values are limited to 1 KiB", k, len(v))
		}
	}
	switch req.OnTimeout {
	case "", api.OnTimeoutDestroy, api.OnTimeoutPause:
	default:
		return nil, errdefs.Invalid("on_timeout must be %q or %q, got %q", api.OnTimeoutDestroy, api.OnTimeoutPause, req.OnTimeout)
	}
	if req.IdleTimeoutSeconds < 0 || req.IdleTimeoutSeconds > maxIdleTimeout {
		return nil, errdefs.Invalid("idle_timeout must be between 1 and %d seconds, or 0 for none, got %d", int64(maxIdleTimeout), req.IdleTimeoutSeconds)
	}
	return r, nil
}

func ttlString(d time.Duration) string {
	if d == 0 {
		return "none"
	}
	return fmt.Sprint(d)
}

// checkTTLLimit refuses a TTL (0: none) above limit (0: no limit); asked
// is the request's ttl_seconds, for the message.
func checkTTLLimit(limit, ttl time.Duration, asked int64) error {
	switch {
	case limit <= 0 || ttl > 0 && ttl <= limit:
		return nil
	case ttl == 0:
		return errdefs.Invalid("this daemon refuses sandboxes without a TTL: its limits.ttl is %s (ttl_seconds at most %d); give a TTL, or set limits.ttl = \"0\" in its config to allow none", shortDuration(limit), int64(limit/time.Second))
	}
	return errdefs.Invalid("ttl_seconds must be at most %d (%s, limits.ttl in the daemon's config), got %d", int64(limit/time.Second), shortDuration(limit), asked)
}

// shortDuration writes 24h rather than 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
