package container

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// ppid reads a process's parent from /proc.
func ppid(t *testing.T, pid int) int {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	p, _ := strconv.Atoi(f[1])
	return p
}

// Sandboxes are started by the pre-forked launcher, not forked from the
// daemon; with AGENTBOX_LAUNCHER=off, from the daemon as before. Both
// boot and are destroyed completely.
func TestLauncherStartsSandboxes(t *testing.T) {
	guest := drivertest.BuildGuest(t)
	parent := drivertest.CgroupParent(t)
	const uidBase = 1000000
	d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: uidBase, Seccomp: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.launch.Close)
	layers := []string{drivertest.BusyboxRootfs(t, uidBase)}
	for _, mode := range []string{"on", "off"} {
		t.Run(mode, func(t *testing.T) {
			t.Setenv("AGENTBOX_LAUNCHER", mode)
			id := "lt" + mode + strconv.FormatInt(time.Now().UnixNano()%1000000, 10)
			spec := testSpec(t, id, layers, uidBase)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			h, err := d.Create(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			pp := ppid(t, h.Pid)
			cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(pp) + "/cmdline")
			fromLauncher := strings.HasPrefix(string(cmdline), "agentbox-launcher\x00")
			if want := mode == "on"; fromLauncher != want || (mode == "off" && pp != os.Getpid()) {
				t.Errorf("mode %s: the sandbox's parent is %d (%q); want the launcher: %v", mode, pp, cmdline, want)
			}
			if got, err := drivertest.Exec(ctx, d, h, "hostname"); err != nil || strings.TrimSpace(got.Stdout) != "sbx-"+id {
				t.Errorf("exec in a launched sandbox: %+v, %v", got, err)
			}
			if err := d.Destroy(ctx, h); err != nil {
				t.Fatal(err)
			}
			select {
			case <-d.Exited(h):
			default:
			}
			// Gone, and reaped (by the launcher, or by us) within moments.
			for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(5 * time.Millisecond) {
				b, err := os.ReadFile("/proc/" + strconv.Itoa(h.Pid) + "/stat")
				if err != nil || !strings.Contains(string(b), ") "+"Z") && ppid(t, h.Pid) != pp {
					break // no such process, or the pid now names another
				}
				if time.Now().After(deadline) {
					t.Fatalf("sandbox init %d not reaped 10 s after destroy: %s", h.Pid, b)
				}
			}
		})
	}
}
