package integration

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// Network items of SECURITY.md's battery (9-12), as they stand with
// egress "none", the only policy built so far (docs/network.md): the
// sandbox sees loopback only, and nothing outside it is reachable.

// reach runs testdata/network/reach.py in a base sandbox against targets
// and returns its verdict per target plus the interfaces line.
func (b *battery) reach(t *testing.T, targets ...string) (map[string]string, string) {
	t.Helper()
	if b.netSB == "" {
		t.Fatal("the base template is missing: run scripts/build-template.sh base --no-import (make test does)")
	}
	id := b.netSB
	src, err := os.Open(filepath.Join("testdata", "network", "reach.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := env.client.WriteFile(context.Background(), id, "/tmp/reach.py", src, 0o644); err != nil {
		t.Fatal(err)
	}
	res := b.hostile(t, id, api.ExecRequest{Cmd: append([]string{"python3", "/tmp/reach.py"}, targets...), TimeoutMs: 120000})
	if res.ExitCode != 0 {
		t.Fatalf("reach.py exited %d: %s", res.ExitCode, res.Stderr)
	}
	out := map[string]string{}
	var ifaces string
	for _, line := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(line, " ")
		if k == "interfaces" {
			ifaces = v
			continue
		}
		out[k] = v
	}
	evidence(t, "interfaces %s; %v", ifaces, out)
	if ifaces != "lo" {
		t.Errorf("the sandbox sees interfaces %q, want lo only", ifaces)
	}
	for _, tg := range targets {
		v, ok := out[tg]
		if !ok || !strings.HasPrefix(v, "refused:") {
			t.Errorf("%s from inside the sandbox: %q, want refused", tg, v)
		}
	}
	return out, ifaces
}

// hostListeners opens a TCP listener on every host address and counts
// what it accepts; it returns the targets.
func hostListeners(t *testing.T) ([]string, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	ln := serveTCP(t, "tcp", ":0", func(c net.Conn) { n.Add(1); c.Close() }) // every address, v4 and v6
	port := ln.Addr().(*net.TCPAddr).Port
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	var targets []string
	for _, a := range addrs {
		ip, ok := a.(*net.IPNet)
		if !ok || ip.IP.IsLinkLocalUnicast() {
			continue
		}
		targets = append(targets, net.JoinHostPort(ip.IP.String(), fmt.Sprint(port)))
	}
	return targets, &n
}

func itemRawICMP(t *testing.T, b *battery) {
	// Raw sockets may open (the sandbox's root owns its own network
	// namespace) but there is no interface but lo to send on: ICMP and
	// ARP to the host go nowhere.
	targets, accepted := hostListeners(t)
	for _, tg := range targets {
		if h, _, _ := net.SplitHostPort(tg); net.ParseIP(h).To4() != nil && !net.ParseIP(h).IsLoopback() {
			targets = append(targets, "icmp/"+h)
		}
	}
	b.reach(t, targets...)
	if accepted.Load() != 0 {
		t.Errorf("host listeners accepted %d connections", accepted.Load())
	}
}

func itemHostAndAPI(t *testing.T, b *battery) {
	targets, accepted := hostListeners(t)
	// The API's TCP port (the test daemon listens on its socket only, so
	// 7423 is whatever the host runs there) and the loopback of the host.
	targets = append(targets, "127.0.0.1:7423", "10.200.0.1:80")
	b.reach(t, targets...)
	if accepted.Load() != 0 {
		t.Errorf("host listeners accepted %d connections from the sandbox", accepted.Load())
	}
}

func itemMetadata(t *testing.T, b *battery) {
	b.reach(t, "169.254.169.254:80", "169.254.170.2:80", "[fd00:ec2::254]:80", "100.100.100.200:80")
}

func itemSiblings(t *testing.T, b *battery) {
	// A sibling has no address but its own loopback; a scan of the pool
	// the veths will use finds nothing.
	var targets []string
	for i := 1; i <= 16; i++ {
		targets = append(targets, fmt.Sprintf("10.200.0.%d:22", i))
	}
	b.reach(t, targets...)
}
