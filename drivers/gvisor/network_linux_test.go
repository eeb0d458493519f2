package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/driver/drivertest"
)

// TestDriverNetNS runs a sandbox in a prepared network namespace (what the
// service gives a sandbox with egress): a veth whose sandbox end has an
// address and a default route. gVisor's netstack must take the interface
// over: a connection from inside reaches a listener on the host end, and
// the host sees it come from the sandbox's address.
func TestDriverNetNS(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("this test runs a real gVisor sandbox and needs root (make test runs as root)")
	}
	lower := "/var/lib/agentbox/build/busybox"
	if _, err := os.Stat(filepath.Join(lower, "bin")); err != nil {
		t.Fatal("no busybox rootfs: run scripts/build-template.sh busybox --no-import (make test does)")
	}
	suffix := fmt.Sprintf("%d", time.Now().UnixNano()%1000000)
	ns, hostIf := "abx-gvn-"+suffix, "gvn"+suffix
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	ip("netns", "add", ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", hostIf).Run()
		_ = exec.Command("ip", "netns", "del", ns).Run()
	})
	ip("link", "add", hostIf, "type", "veth", "peer", "name", "eth0", "netns", ns)
	ip("addr", "add", "10.203.77.1/30", "dev", hostIf)
	ip("link", "set", hostIf, "up")
	ip("-n", ns, "addr", "add", "10.203.77.2/30", "dev", "eth0")
	ip("-n", ns, "link", "set", "eth0", "up")
	ip("-n", ns, "link", "set", "lo", "up") // as network.NewNetNS leaves it
	ip("-n", ns, "route", "add", "default", "via", "10.203.77.1")
	ln, err := net.Listen("tcp4", "10.203.77.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	from := make(chan string, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		from <- c.RemoteAddr().String()
		c.Write([]byte("hello-from-host\n"))
		c.Close()
	}()

	parent := drivertest.CgroupParent(t)
	guest := drivertest.BuildGuest(t)
	d, err := New(driver.Options{GuestBinary: guest, CgroupParent: parent, UIDBase: 1000000, UIDCount: 65536})
	if err != nil {
		t.Fatal(err)
	}
	tmp, _ := os.MkdirTemp("/var/tmp", "gvisor-test-")
	defer os.RemoveAll(tmp)
	spec := &driver.Spec{ID: "gvn" + suffix, Hostname: "gvn", Layers: []string{lower},
		UpperDir: filepath.Join(tmp, "upper"), WorkDir: filepath.Join(tmp, "work"), RunDir: filepath.Join(tmp, "run"),
		Env: []string{"PATH=/bin:/usr/bin"}, CPU: 1, MemoryMB: 256, Pids: 128,
		NetNS: filepath.Join("/var/run/netns", ns)}
	_ = os.Chmod(tmp, 0o711)
	for _, dir := range []string{spec.UpperDir, spec.WorkDir, spec.RunDir} {
		_ = os.MkdirAll(dir, 0o711)
		_ = os.Chown(dir, 1000000, 1000000)
	}
	_ = os.Chown(spec.RunDir, 0, 0)
	ctx := context.Background()
	h, err := d.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Destroy(ctx, h)
	port := ln.Addr().(*net.TCPAddr).Port
	res, err := drivertest.Exec(ctx, d, h, fmt.Sprintf("cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | sort | tr '\\n' ' '; nc 10.203.77.1 %d </dev/null", port))
	if err != nil {
		t.Fatal(err)
	}
	out := []byte(res.Stdout + res.Stderr)
	select {
	case addr := <-from:
		if !strings.HasPrefix(addr, "10.203.77.2:") {
			t.Errorf("the host saw the connection from %s, want 10.203.77.2", addr)
		}
	case <-time.After(10 * time.Second):
		logb, _ := os.ReadFile(filepath.Join(spec.RunDir, "runsc.log"))
		cfg, _ := os.ReadFile(filepath.Join(spec.RunDir, "bundle", "config.json"))
		t.Fatalf("no connection from the sandbox reached the host end of its veth; exec: %s\nrunsc.log: %s\nconfig: %s", out, logb, cfg)
	}
	if !bytes.Contains(out, []byte("eth0 lo")) || !bytes.Contains(out, []byte("hello-from-host")) {
		t.Errorf("in the sandbox: %s; want eth0 and lo, and the host's answer", out)
	}
}
