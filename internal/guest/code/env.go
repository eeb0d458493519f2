package code

import (
	"context"
	"encoding/json"
	"maps"
	"slices"
	"strings"
)

// UpdateEnv passes a change of the agent's default environment, from old
// to updated (KEY=VALUE entries), to the kernels already running: a warm
// pool sandbox's kernel starts before the create it serves gives the
// sandbox its env. A Python kernel's os.environ is updated in place by a
// silent cell (its state and its pid stay); another language's kernel is
// restarted, since only a fresh process takes a new environment. Keys a
// context or its kernelspec sets itself keep their values. Each kernel is
// updated between runs, holding the context's run token.
func (m *Manager) UpdateEnv(ctx context.Context, old, updated []string) {
	set, unset := envDiff(old, updated)
	if len(set) == 0 && len(unset) == 0 {
		return
	}
	m.mu.Lock()
	cs := slices.Collect(maps.Values(m.ctxs))
	m.mu.Unlock()
	for _, c := range cs {
		own := func(k string) bool {
			_, a := c.env[k]
			_, b := c.spec.Env[k]
			return a || b
		}
		cset := maps.Clone(set)
		maps.DeleteFunc(cset, func(k, _ string) bool { return own(k) })
		cunset := slices.DeleteFunc(slices.Clone(unset), own)
		if len(cset) == 0 && len(cunset) == 0 {
			continue
		}
		if c.spec.Language != "python" {
			c.mu.Lock()
			live := c.k != nil && !c.k.dead()
			c.mu.Unlock()
			if live {
				if _, err := m.Restart(ctx, c.id); err != nil {
					m.log.Warn("restarting a kernel for a new environment", "context", c.id, "err", err)
				}
			}
			continue
		}
		m.setKernelEnv(ctx, c, cset, cunset)
	}
}

// setKernelEnv updates a live Python kernel's os.environ.
func (m *Manager) setKernelEnv(ctx context.Context, c *codeContext, set map[string]string, unset []string) {
	select {
	case <-c.run:
	case <-ctx.Done():
		return
	}
	defer func() { c.run <- struct{}{} }()
	c.mu.Lock()
	k := c.k
	c.mu.Unlock()
	if k == nil || k.dead() {
		return // a later kernel starts with the new environment
	}
	// JSON strings and objects of strings are Python literals.
	s, _ := json.Marshal(set)
	u, _ := json.Marshal(unset)
	code := "import os as _agentbox_os\n" +
		"_agentbox_os.environ.update(" + string(s) + ")\n" +
		"for _agentbox_k in " + string(u) + ": _agentbox_os.environ.pop(_agentbox_k, None)\n" +
		"del _agentbox_os\n"
	if len(unset) > 0 {
		code += "del _agentbox_k\n"
	}
	if _, err := k.execSilent(ctx, code); err != nil {
		m.log.Warn("updating a kernel's environment", "context", c.id, "err", err)
	}
}

// envDiff returns what turns environment old into updated: the keys to
// set (new or changed) and the keys to remove.
func envDiff(old, updated []string) (set map[string]string, unset []string) {
	toMap := func(env []string) map[string]string {
		out := make(map[string]string, len(env))
		for _, kv := range env {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				out[k] = v
			}
		}
		return out
	}
	o, n := toMap(old), toMap(updated)
	set = map[string]string{}
	for k, v := range n {
		if ov, ok := o[k]; !ok || ov != v {
			set[k] = v
		}
	}
	for k := range o {
		if _, ok := n[k]; !ok {
			unset = append(unset, k)
		}
	}
	slices.Sort(unset)
	return set, unset
}
