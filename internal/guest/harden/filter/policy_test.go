package filter

import (
	"slices"
	"testing"
)

func TestPolicy(t *testing.T) {
	r, err := Policy()
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"read", "write", "execve", "openat", "futex", "mmap", "rt_sigreturn", "arch_prctl", "ptrace", "setuid"} {
		if !slices.Contains(r.Allowed, name) {
			t.Errorf("%s is not allowed; ordinary programs need it", name)
		}
	}
	for _, name := range alwaysDenied {
		if slices.Contains(r.Allowed, name) {
			t.Errorf("%s is both always-denied and allowed", name)
		}
		if _, ok := r.Conditional[name]; ok {
			t.Errorf("%s is both always-denied and conditionally allowed", name)
		}
	}
	for _, name := range []string{"clone", "socket", "personality"} {
		if r.Conditional[name] == "" {
			t.Errorf("%s has no conditional rule", name)
		}
	}
	prog, err := Program()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d allowed, %d conditional, %d denied; %d BPF instructions", len(r.Allowed), len(r.Conditional), len(r.Denied), len(prog))
}
