package storage

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/tenancy"
)

// TestOverlayInUserNamespace does what the guest does: as root of a user
// namespace mapped onto UIDBase.., mount an overlay of a template over a
// layer, write through it, and hit the layer's limit.
func TestOverlayInUserNamespace(t *testing.T) {
	p, _ := newTestPool(t)
	ctx := tenancy.Admin(context.Background())
	tpl, err := p.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "t", Rootfs: makeTree(t)})
	if err != nil {
		t.Fatal(err)
	}
	upper, work, err := p.CreateLayer(ctx, "ovl", 20, tpl.LowerDirs())
	if err != nil {
		t.Fatal(err)
	}
	mnt := filepath.Join(filepath.Dir(upper), "..", "..", "..", "mnt-ovl")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`set -e
mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s
cd %s
test "$(stat -c %%u bin/tool)" = 0
test "$(stat -c %%u:%%g home/user/notes)" = 1000:1001
echo changed > bin/tool
mkdir -p home/user/new && chown 1000:1000 home/user/new
if out=$(dd if=/dev/zero of=fill bs=1M count=30 conv=fsync 2>&1); then echo "no limit"; exit 1; fi
echo "$out" | grep -q "Disk quota exceeded"
echo ok`, tpl.Rootfs, upper, work, mnt, mnt)
	cmd := exec.Command("sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
		Credential:  &syscall.Credential{Uid: 0, Gid: 0},
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testUIDBase, Size: 65536}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: testUIDBase, Size: 65536}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.HasSuffix(strings.TrimSpace(string(out)), "ok") {
		t.Fatalf("overlay in user namespace: %v\n%s", err, out)
	}
	// The change landed in the layer, shifted; the template is untouched.
	if b, _ := os.ReadFile(filepath.Join(upper, "bin/tool")); string(b) != "changed\n" {
		t.Errorf("upper bin/tool = %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(tpl.Rootfs, "bin/tool")); string(b) == "changed\n" {
		t.Error("template changed through the overlay")
	}
	fi, err := os.Stat(filepath.Join(upper, "home/user/new"))
	if err != nil {
		t.Fatal(err)
	}
	if uid := statUID(fi); uid != testUIDBase+1000 {
		t.Errorf("new dir owned by host uid %d, want %d", uid, testUIDBase+1000)
	}
}
