package cgroups

import (
	"os"
	"path/filepath"
	"testing"
)

// TestOOMKillsV1 sums the subtree's counts: v1 counts a kill only in the
// cgroup whose limit was hit (a sandbox's workload child).
func TestOOMKillsV1(t *testing.T) {
	dir := t.TempDir()
	write := func(rel, oomKill string) {
		d := filepath.Join(dir, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		data := "oom_kill_disable 0\nunder_oom 0\noom_kill " + oomKill + "\n"
		if err := os.WriteFile(filepath.Join(d, "memory.oom_control"), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(".", "1")
	write("workload", "3")
	write("workload/deeper", "2")
	if n, err := oomKillsV1(dir); err != nil || n != 6 {
		t.Fatalf("oomKillsV1 = %d, %v; want 6", n, err)
	}
	if _, err := oomKillsV1(filepath.Join(dir, "gone")); err == nil {
		t.Error("no error for a missing cgroup")
	}
}
