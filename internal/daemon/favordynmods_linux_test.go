package daemon

import "testing"

func TestCgroup2Mount(t *testing.T) {
	tests := []struct {
		name, mountinfo, dir string
		has                  bool
	}{
		{"hybrid v1 host", `25 24 0:22 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:4 - tmpfs tmpfs ro,mode=755
26 25 0:23 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:5 - cgroup2 cgroup2 rw,nsdelegate
28 25 0:25 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:9 - cgroup cgroup rw,pids`, "/sys/fs/cgroup/unified", false},
		{"v2 with it", `30 24 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,favordynmods,memory_recursiveprot`, "/sys/fs/cgroup", true},
		{"v1 only", `28 25 0:25 / /sys/fs/cgroup/pids rw,relatime shared:9 - cgroup cgroup rw,pids`, "", false},
		{"optional fields", `26 25 0:23 / /sys/fs/cgroup/unified rw,relatime shared:5 master:1 - cgroup2 cgroup2 rw`, "/sys/fs/cgroup/unified", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, has := cgroup2Mount(tt.mountinfo)
			if dir != tt.dir || has != tt.has {
				t.Errorf("cgroup2Mount = %q, %v; want %q, %v", dir, has, tt.dir, tt.has)
			}
		})
	}
}
