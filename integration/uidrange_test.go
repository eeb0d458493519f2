package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// TestOwnUIDRanges: every sandbox runs in a host uid range of its own
// (uid_ranges, internal/idrange), on both tiers: two sandboxes' ranges
// differ and neither is the canonical uid_base.. range; inside, the
// template's files are root's and a file user 1000 makes is 1000's; on
// the host's disk that file is canonical (uid_base+1000), so that a
// snapshot, a fork or a restart keeps it whatever range runs it next; the
// host sees the sandbox's processes under its range only; a container
// sandbox's user namespace is owned by its root's host uid; and an escape
// from one sandbox (a host process with its root's uid) can signal none
// of the other's processes and read none of its files.
func TestOwnUIDRanges(t *testing.T) {
	for _, tier := range batteryTiers(t) {
		t.Run(tier, func(t *testing.T) {
			a := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: tier})
			b := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Isolation: tier})
			ba, bb := sandboxUIDBase(t, a), sandboxUIDBase(t, b)
			for _, base := range []int{ba, bb} {
				if base < env.cfg.UIDBase+env.cfg.UIDCount || (base-env.cfg.UIDBase)%env.cfg.UIDCount != 0 {
					t.Errorf("a sandbox's range starts at %d; want uid_base + k x uid_count, k >= 1", base)
				}
			}
			if ba == bb {
				t.Fatalf("two sandboxes share the host uid range %d", ba)
			}
			root := mustSh(t, a, "stat -c '%u:%g' /bin/busybox")
			res := execReq(t, a, api.ExecRequest{Shell: "echo x > /home/user/f && stat -c '%u:%g' /home/user/f", User: "user"})
			if root != "0:0" || res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "1000:1000" {
				t.Errorf("inside: a template file is %q, want 0:0; user 1000's new file %q (exit %d, %s), want 1000:1000", root, res.Stdout, res.ExitCode, res.Stderr)
			}
			var st syscall.Stat_t
			f := filepath.Join(env.cfg.DataDir, "storage", "sandboxes", a, "upper", "home", "user", "f")
			if err := syscall.Stat(f, &st); err != nil {
				t.Fatal(err)
			}
			if want := uint32(env.cfg.UIDBase + 1000); st.Uid != want || st.Gid != want {
				t.Errorf("on disk the file is %d:%d, want the canonical %d:%d", st.Uid, st.Gid, want, want)
			}
			mustSh(t, a, "sleep 30 >/dev/null 2>&1 &")
			n := 0
			for _, pid := range sandboxPids(a) {
				s, err := procStatus(pid)
				if err != nil {
					continue
				}
				n++
				for _, u := range strings.Fields(s["Uid"]) {
					var v int
					fmt.Sscan(u, &v)
					if v < ba || v >= ba+env.cfg.UIDCount {
						t.Errorf("host pid %d of sandbox %s runs as host uid %d, outside its range [%d, %d)", pid, a, v, ba, ba+env.cfg.UIDCount)
					}
				}
			}
			if n == 0 {
				t.Errorf("no host process of sandbox %s", a)
			}
			if tier == "container" {
				// Its user namespace is its root's, so what the kernel
				// counts per user one level up is charged to ba, not to
				// the host's root.
				fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/user", sandboxPid(t, a)), unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				owner, err := unix.IoctlGetUint32(fd, unix.NS_GET_OWNER_UID)
				unix.Close(fd)
				if err != nil || int(owner) != ba {
					t.Errorf("sandbox %s's user namespace is owned by %d (%v), want its root's host uid %d", a, owner, err, ba)
				}
			}
			// An escape from a's namespaces is host uid ba: it can signal
			// none of b's host processes and read none of b's files.
			mustSh(t, b, "echo secret > /root/s; chmod 600 /root/s")
			victims := sandboxPids(b)
			if len(victims) == 0 {
				t.Fatalf("no host process of sandbox %s", b)
			}
			asA := func(name string, args ...string) error {
				c := exec.Command(name, args...)
				c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(ba), Gid: uint32(ba)}}
				return c.Run()
			}
			for _, pid := range victims {
				if err := asA("kill", "-0", strconv.Itoa(pid)); err == nil {
					t.Errorf("host uid %d (sandbox %s's root) may signal pid %d of sandbox %s", ba, a, pid, b)
				}
			}
			secret := filepath.Join(env.cfg.DataDir, "storage", "sandboxes", b, "upper", "root", "s")
			if _, err := os.Stat(secret); err != nil {
				t.Fatalf("b's file on disk: %v", err)
			}
			if err := asA("cat", secret); err == nil {
				t.Errorf("host uid %d (sandbox %s's root) reads sandbox %s's file %s", ba, a, b, secret)
			}
			evidence(t, "%s: ranges %d and %d; a file of user 1000 inside is %d:%d on disk; %d host processes in [%d, %d); as host uid %d: kill -0 of b's %d processes and cat of b's 0600 file refused", tier, ba, bb, st.Uid, st.Gid, n, ba, ba+env.cfg.UIDCount, ba, len(victims))
		})
	}
}
