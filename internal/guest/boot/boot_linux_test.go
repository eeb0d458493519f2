package boot

import "testing"

func TestCgroupsAtRoot(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want bool
	}{
		{"12:pids:/\n11:cpu,cpuacct:/\n1:name=systemd:/\n0::/\n", true},
		{"0::/\n", true},
		{"12:pids:/\n11:cpu,cpuacct:/../init-x-3\n0::/\n", false},
		{"12:pids:/agentbox/abc\n", false},
		{"0::/a:b\n", false},
		{"garbage\n", false},
		{"", false},
	} {
		if got := cgroupsAtRoot(tc.in); got != tc.want {
			t.Errorf("cgroupsAtRoot(%q) = %v, want %v", tc.in, got, tc.want)
		}
	}
}
