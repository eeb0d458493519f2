package guest

import (
	"slices"
	"strings"

	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/guest/users"
)

// defaultPath is the PATH of an exec whose environment has none.
const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// buildEnv builds an exec's environment from scratch: the sandbox's
// defaults, then the request's variables (which win, in sorted key order
// so the result is deterministic), then HOME, USER, LOGNAME and PATH where
// neither set them. Nothing of the agent's own environment leaks in.
func buildEnv(defaults []string, req map[string]string, u users.User) ([]string, error) {
	env := make([]string, 0, len(defaults)+len(req)+4)
	index := make(map[string]int, len(defaults)+len(req)+4)
	set := func(k, kv string) {
		if i, ok := index[k]; ok {
			env[i] = kv
			return
		}
		index[k] = len(env)
		env = append(env, kv)
	}
	for _, kv := range defaults {
		k, _, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			continue // not KEY=VALUE: the sandbox's config is at fault, skip it
		}
		set(k, kv)
	}
	keys := make([]string, 0, len(req))
	for k := range req {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v := req[k]
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errdefs.Invalid("env key %q is not a valid variable name; use a name without '=' or NUL", k)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return nil, errdefs.Invalid("env %s contains a NUL byte; remove it", k)
		}
		set(k, k+"="+v)
	}
	for _, d := range [...][2]string{
		{"HOME", u.Home},
		{"USER", u.Name},
		{"LOGNAME", u.Name},
		{"PATH", defaultPath},
	} {
		if _, ok := index[d[0]]; !ok && d[1] != "" {
			set(d[0], d[0]+"="+d[1])
		}
	}
	return env, nil
}

// lookupEnv returns the value of key in a KEY=VALUE list.
func lookupEnv(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}
