package integration

import (
	"os"
	"strings"
	"testing"
)

// The daemon (cgroup_favordynmods, default true) leaves the host's
// cgroup2 mount with favordynmods, so cgroup moves skip the RCU grace
// period (docs/PERFORMANCE.md).
func TestCgroupFavorDynmods(t *testing.T) {
	if !env.cfg.CgroupFavorDynmods {
		t.Fatal("the test daemon's config has cgroup_favordynmods off; the default is on")
	}
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok || !strings.HasPrefix(post, "cgroup2 ") {
			continue
		}
		if !strings.Contains(pre+" "+post, "favordynmods") {
			t.Errorf("cgroup2 mount without favordynmods after the daemon started: %s", line)
		}
		return
	}
	t.Fatal("this host has no cgroup2 mount (the project's hosts have one, hybrid or unified)")
}
