package guest

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCPULimitEnv: an exec's OMP_NUM_THREADS is ceil(quota/period) of the
// sandbox's cgroup, read anew each time (a resize shows at the next
// exec), and absent without a quota or with one that allows every CPU.
func TestCPULimitEnv(t *testing.T) {
	for _, v2 := range []bool{false, true} {
		root := t.TempDir()
		dir := root
		if v2 {
			dir = filepath.Join(root, "workload")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		write := func(quota, period string) {
			t.Helper()
			files := map[string]string{"cpu.cfs_quota_us": quota, "cpu.cfs_period_us": period}
			if v2 {
				files = map[string]string{"cpu.max": quota + " " + period}
			}
			for name, body := range files {
				if err := os.WriteFile(filepath.Join(root, name), []byte(body+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
		write("-1", "100000")
		if v2 {
			write("max", "100000")
		}
		fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(fd)
		l := openCPULimit([]CgroupDir{{FD: fd, V2: v2}, {FD: fd, V2: v2, CPU: true}}, 4)
		if l == nil {
			t.Fatalf("v2=%v: no CPU limit opened", v2)
		}
		if got := l.env(); got != "" {
			t.Errorf("v2=%v, no quota: env %q, want none", v2, got)
		}
		for _, c := range []struct{ quota, period, want string }{
			{"100000", "100000", "OMP_NUM_THREADS=1"},
			{"50000", "100000", "OMP_NUM_THREADS=1"},
			{"150000", "100000", "OMP_NUM_THREADS=2"},
			{"400000", "100000", ""}, // every CPU: nproc says so already
			{"800000", "100000", ""},
		} {
			write(c.quota, c.period)
			if got := l.env(); got != c.want {
				t.Errorf("v2=%v, quota %s/%s: env %q, want %q", v2, c.quota, c.period, got, c.want)
			}
			want, _ := strconv.Atoi(strings.TrimPrefix(c.want, "OMP_NUM_THREADS="))
			if got := l.count(); got != want {
				t.Errorf("v2=%v, quota %s/%s: count %d, want %d", v2, c.quota, c.period, got, want)
			}
		}
	}
	if l := openCPULimit([]CgroupDir{{FD: 0}}, 0); l != nil {
		t.Errorf("openCPULimit without a CPU dir = %+v, want nil", l)
	}
	var s *Server = &Server{cfg: Config{Env: []string{"OMP_NUM_THREADS=3", "A=b"}}}
	if got := s.defaultEnv(); len(got) != 2 {
		t.Errorf("defaultEnv without a CPU limit = %q", got)
	}
}

// A fixed limit (the gvisor tier's, from the boot spec) says itself when
// it is below the CPUs the agent may run on, and nothing otherwise.
func TestFixedCPULimit(t *testing.T) {
	for _, c := range []struct {
		n, cpus int
		want    string
	}{{1, 2, "OMP_NUM_THREADS=1"}, {3, 8, "OMP_NUM_THREADS=3"}, {2, 2, ""}, {4, 2, ""}} {
		if got := fixedCPULimit(c.n, c.cpus).env(); got != c.want {
			t.Errorf("%d of %d CPUs: %q, want %q", c.n, c.cpus, got, c.want)
		}
	}
}
