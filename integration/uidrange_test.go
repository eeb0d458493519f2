package integration

import (
	"fmt"

	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// TestOwnUIDRanges: every sandbox runs in a host uid range of its own
// (uid_ranges, internal/idrange), on both tiers: two sandboxes' ranges
// differ and neither is the canonical uid_base.. range; inside, the
// template's files are root's and a file given to user 1000 is 1000's;
// on the host's disk that file is canonical (uid_base+1000), so that a
// snapshot, a fork or a restart keeps it whatever range runs it next; the
// host sees the sandbox's processes under its range only.
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
			out := mustSh(t, a, "stat -c '%u:%g' /bin/busybox; echo x > /root/f; chown 1000:1000 /root/f; stat -c '%u:%g' /root/f")
			if got := strings.Fields(out); len(got) != 2 || got[0] != "0:0" || got[1] != "1000:1000" {
				t.Errorf("inside: template file and user file owned %q, want 0:0 and 1000:1000", out)
			}
			var st syscall.Stat_t
			f := filepath.Join(env.cfg.DataDir, "storage", "sandboxes", a, "upper", "root", "f")
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
			evidence(t, "%s: ranges %d and %d; /root/f given to 1000 inside is %d:%d on disk; %d host processes in [%d, %d)", tier, ba, bb, st.Uid, st.Gid, n, ba, ba+env.cfg.UIDCount)
		})
	}
}
