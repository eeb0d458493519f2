package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func TestScratch(t *testing.T) {
	h, _ := env.client.Health(context.Background())
	fmt.Printf("health %+v\n", h)
	id := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Pids: 64, MemoryMB: 64, DiskMB: 64, CPU: 0.5})
	sb, _ := env.client.GetSandbox(context.Background(), id)
	fmt.Printf("sb %+v\n", sb)
	for _, s := range []string{"id; ls /proc; cat /proc/self/status | grep -E 'Cap|NoNew|Secc'; ls -la /proc/self/fd; mount; ls /dev /sys /sys/fs; cat /proc/1/cmdline; ls -la /proc/1/exe; ls /sys/fs/cgroup", "find / -type s 2>/dev/null; echo; df /; ulimit -n; cat /proc/self/cgroup"} {
		r := sh(t, id, s)
		fmt.Printf("%d\n%s\n%s\n", r.ExitCode, r.Stdout, r.Stderr)
	}
	out, _ := exec.Command("sh", "-c", fmt.Sprintf("find /sys/fs/cgroup/*/%s -maxdepth 2 | head -50; cat /proc/%d/status | grep -E 'Cap|NoNew|Secc|Uid'; cat /proc/%d/uid_map; ls -la /proc/%d/ns", env.cfg.CgroupParent, sb.Pid, sb.Pid, sb.Pid)).CombinedOutput()
	fmt.Println(string(out))
	_ = os.Stdout
}
