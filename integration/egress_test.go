package integration

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// testPool picks this test daemon's sandbox address pool: a /24 of
// 10.201.0.0/16, so that test daemons running at once on one host do not
// share addresses.
func testPool() string {
	b, _ := strconv.ParseUint(randHex(1), 16, 8)
	return fmt.Sprintf("10.201.%d.0/24", b)
}

// countNet counts this daemon's sandbox veths (tagged with its cgroup
// parent) and the sandbox chains of its nftables table.
func countNet(t testing.TB) (veths, chains int) {
	links, _ := netlink.LinkList()
	for _, l := range links {
		if l.Attrs().Alias == env.cfg.CgroupParent {
			veths++
		}
	}
	out, _ := exec.Command("nft", "list", "table", "inet", env.cfg.CgroupParent).Output()
	chains = strings.Count(string(out), "chain sbx-")
	return veths, chains
}

// testInternet is a network namespace standing in for the internet: a
// veth to the host in a 198.18.0.0/15 benchmark subnet, public hosts at
// .2 and .3, a private-range host and a link-local host (routed from the
// host into the namespace), each with an HTTP server on 8080 and 8081.
type testInternet struct {
	ns, hostIf         string
	hostAddr           string // the host's end, 198.18.N.1
	pub, pub2          string // 198.18.N.2, .3
	private, linkLocal string // 10.202.N.2, 169.254.77.N
}

func newTestInternet(t *testing.T) *testInternet {
	t.Helper()
	sfx := randHex(2)
	b, _ := strconv.ParseUint(sfx[:2], 16, 8)
	n := int(b)
	ti := &testInternet{
		ns: "abx-it-inet-" + sfx, hostIf: "itn" + sfx,
		hostAddr: fmt.Sprintf("198.18.%d.1", n), pub: fmt.Sprintf("198.18.%d.2", n), pub2: fmt.Sprintf("198.18.%d.3", n),
		private: fmt.Sprintf("10.202.%d.2", n), linkLocal: fmt.Sprintf("169.254.77.%d", n),
	}
	run := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	run("netns", "add", ti.ns)
	t.Cleanup(func() {
		_ = exec.Command("ip", "link", "del", ti.hostIf).Run()
		for _, a := range []string{ti.private, ti.linkLocal} {
			_ = exec.Command("ip", "route", "del", a+"/32").Run()
		}
		_ = exec.Command("ip", "netns", "del", ti.ns).Run()
	})
	run("link", "add", ti.hostIf, "type", "veth", "peer", "name", "eth0", "netns", ti.ns)
	run("addr", "add", ti.hostAddr+"/24", "dev", ti.hostIf)
	run("link", "set", ti.hostIf, "up")
	run("-n", ti.ns, "link", "set", "lo", "up")
	run("-n", ti.ns, "link", "set", "eth0", "up")
	for _, a := range []string{ti.pub + "/24", ti.pub2 + "/24", ti.private + "/32", ti.linkLocal + "/32"} {
		run("-n", ti.ns, "addr", "add", a, "dev", "eth0")
	}
	run("-n", ti.ns, "route", "add", "default", "via", ti.hostAddr)
	for _, a := range []string{ti.private, ti.linkLocal} {
		run("route", "add", a+"/32", "via", ti.pub)
	}
	// Listeners made on a thread inside the namespace stay there.
	lns := make(chan []net.Listener, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(filepath.Join("/var/run/netns", ti.ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		var ls []net.Listener
		for _, p := range []string{":8080", ":8081"} {
			if err != nil {
				break
			}
			var l net.Listener
			if l, err = net.Listen("tcp4", p); err == nil {
				ls = append(ls, l)
			}
		}
		errc <- err
		lns <- ls
	}()
	if err := <-errc; err != nil {
		t.Fatalf("listening in the test internet: %v", err)
	}
	for _, l := range <-lns {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "hello from %s", r.Context().Value(http.LocalAddrContextKey))
		})}
		go srv.Serve(l)
		t.Cleanup(func() { srv.Close() })
	}
	return ti
}

// reachFrom runs testdata/network/reach.py in sandbox id and returns each
// target's verdict ("connected" or "refused:...") and the interfaces.
func reachFrom(t *testing.T, id string, targets ...string) (map[string]string, string) {
	t.Helper()
	src, err := os.Open(filepath.Join("testdata", "network", "reach.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := env.client.WriteFile(context.Background(), id, "/tmp/reach.py", src, 0o644); err != nil {
		t.Fatal(err)
	}
	res := execReq(t, id, api.ExecRequest{Cmd: append([]string{"python3", "/tmp/reach.py"}, targets...), TimeoutMs: 120000})
	if res.ExitCode != 0 {
		t.Fatalf("reach.py exited %d: %s", res.ExitCode, res.Stderr)
	}
	out, ifs := map[string]string{}, ""
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		if k == "interfaces" {
			ifs = v
			continue
		}
		out[k] = v
	}
	return out, ifs
}

// expectReach checks reachFrom's verdicts: want[target] true means it
// must connect, false that it must not.
func expectReach(t *testing.T, who, id string, want map[string]bool) {
	t.Helper()
	var targets []string
	for k := range want {
		targets = append(targets, k)
	}
	got, _ := reachFrom(t, id, targets...)
	for k, ok := range want {
		if (got[k] == "connected") != ok {
			t.Errorf("%s: %s: %q, want connected=%v", who, k, got[k], ok)
		}
	}
}

func hostGet(t *testing.T, addr string) {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("the host cannot reach the test internet at %s: %v", addr, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.HasPrefix(string(b), "hello") {
		t.Fatalf("test internet at %s answered %q", addr, b)
	}
}

// TestEgress proves egress none, internet and custom against a test
// internet built in network namespaces, runtime changes, and that destroy
// leaves no veth, chain or address.
func TestEgress(t *testing.T) {
	needBase(t)
	ti := newTestInternet(t)
	// The routes work from the host: a block seen from a sandbox is ours.
	for _, a := range []string{ti.pub, ti.pub2, ti.private, ti.linkLocal} {
		hostGet(t, a+":8080")
	}
	hostPort := hostListener(t)
	var hostIPs []string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !strings.HasPrefix(ipn.IP.String(), "10.201.") {
			hostIPs = append(hostIPs, ipn.IP.String())
		}
	}

	logCreateCost(t)
	a := newSandbox(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{Egress: api.EgressInternet}})
	none := newSandbox(t, api.CreateSandboxRequest{Template: "base"})
	b := newSandbox(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{Egress: api.EgressInternet}})
	sbA, _ := env.client.GetSandbox(context.Background(), a)
	sbB, _ := env.client.GetSandbox(context.Background(), b)
	addrA, _, _ := strings.Cut(sbA.Network.Address, "/")
	addrB, _, _ := strings.Cut(sbB.Network.Address, "/")
	if addrA == "" || addrB == "" || addrA == addrB {
		t.Fatalf("addresses: %q and %q", sbA.Network.Address, sbB.Network.Address)
	}
	gwA := addrA[:strings.LastIndex(addrA, ".")] + "." + strconv.Itoa(lastOctet(addrA)-1)
	mustSh(t, b, "nohup python3 -m http.server 8000 >/dev/null 2>&1 & sleep 1")

	inet := ti.pub + ":8080"
	t.Run("internet", func(t *testing.T) {
		want := map[string]bool{
			inet:                         true,
			ti.pub2 + ":8081":            true,
			gwA + ":" + hostPort:         false, // the host through the gateway
			gwA + ":7423":                false, // the API port on the gateway
			ti.hostAddr + ":" + hostPort: false,
			addrB + ":8000":              false, // a sibling
			ti.linkLocal + ":8080":       false, // link-local (routed, reachable from the host)
			"169.254.169.254:80":         false,
			"100.100.100.200:80":         false,
			ti.private + ":8080":         false, // private range, not named
		}
		for _, ip := range hostIPs {
			want[ip+":"+hostPort] = false
		}
		expectReach(t, "internet", a, want)
		_, ifs := reachFrom(t, a)
		if ifs != "eth0,lo" {
			t.Errorf("interfaces %q, want eth0,lo", ifs)
		}
		// The sibling's server is up: only the policy keeps A out.
		if out := mustSh(t, b, "python3 -c \"import urllib.request;print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\""); strings.TrimSpace(out) != "200" {
			t.Fatalf("sibling's server: %q", out)
		}
	})
	t.Run("none", func(t *testing.T) {
		expectReach(t, "none", none, map[string]bool{inet: false, gwA + ":" + hostPort: false})
		if _, ifs := reachFrom(t, none); ifs != "lo" {
			t.Errorf("interfaces %q, want lo", ifs)
		}
	})
	t.Run("custom", func(t *testing.T) {
		c := newSandbox(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{Egress: api.EgressCustom,
			Allow: []string{"198.18.0.0/15:8080", ti.private},
			Deny:  []string{ti.pub2}}})
		expectReach(t, "custom", c, map[string]bool{
			inet:                   true,
			ti.pub + ":8081":       false, // port not allowed
			ti.pub2 + ":8080":      false, // deny wins
			ti.private + ":8080":   true,  // a private host a rule names
			ti.private + ":8081":   true,
			ti.linkLocal + ":8080": false,
			addrA + ":8000":        false,
		})
	})
	t.Run("runtime", func(t *testing.T) {
		ctx := context.Background()
		if _, err := env.client.SetEgress(ctx, a, api.EgressCustom, []string{ti.pub2}, nil); err != nil {
			t.Fatal(err)
		}
		expectReach(t, "custom at runtime", a, map[string]bool{inet: false, ti.pub2 + ":8080": true})
		if _, stderr, code := cli(t, "", "egress", a, "--egress", "internet", "--deny", ti.pub2); code != 0 {
			t.Fatalf("agentbox egress: %s", stderr)
		}
		expectReach(t, "internet at runtime", a, map[string]bool{inet: true, ti.pub2 + ":8080": false})
		sb, err := env.client.SetEgress(ctx, a, api.EgressNone, nil, nil)
		if err != nil || sb.Network.Address != "" {
			t.Fatalf("to none: %v, %+v", err, sb)
		}
		if _, ifs := reachFrom(t, a); ifs != "lo" {
			t.Errorf("after egress none: interfaces %q, want lo", ifs)
		}
		if _, err := netlink.LinkByName("abx" + a); err == nil {
			t.Errorf("veth abx%s is left after egress none", a)
		}
		if _, err := env.client.SetEgress(ctx, none, api.EgressInternet, nil, nil); err != nil {
			t.Fatal(err)
		}
		expectReach(t, "none to internet", none, map[string]bool{inet: true})
		if _, err := env.client.SetEgress(ctx, none, api.EgressCustom, []string{"example.com:443"}, nil); err == nil || !strings.Contains(err.Error(), "take no port") {
			t.Errorf("a domain rule with a port: %v, want 'take no port'", err)
		}
	})
	t.Run("destroy", func(t *testing.T) {
		_, chainsBefore := countNet(t)
		if err := env.client.DestroySandbox(context.Background(), b); err != nil {
			t.Fatal(err)
		}
		if _, err := netlink.LinkByName("abx" + b); err == nil {
			t.Errorf("veth abx%s is left after destroy", b)
		}
		_, chainsAfter := countNet(t)
		if chainsAfter != chainsBefore-1 {
			t.Errorf("chains %d -> %d after destroy", chainsBefore, chainsAfter)
		}
		out, _ := exec.Command("ip", "-o", "-4", "addr").Output()
		gwB := addrB[:strings.LastIndex(addrB, ".")] + "." + strconv.Itoa(lastOctet(addrB)-1)
		if strings.Contains(string(out), " "+gwB+"/30") {
			t.Errorf("gateway address %s is left after destroy", gwB)
		}
	})
}

func lastOctet(ip string) int {
	n, _ := strconv.Atoi(ip[strings.LastIndex(ip, ".")+1:])
	return n
}

// logCreateCost logs the median create time of busybox sandboxes with
// egress none and internet, alternating (docs/network.md quotes it).
func logCreateCost(t *testing.T) {
	ctx := context.Background()
	const n = 8
	var none, inet []time.Duration
	for i := 0; i < 2*n; i++ {
		req := api.CreateSandboxRequest{Template: "busybox"}
		if i%2 == 1 {
			req.Network = &api.Network{Egress: api.EgressInternet}
		}
		t0 := time.Now()
		sb, err := env.client.CreateSandbox(ctx, req)
		d := time.Since(t0)
		if err != nil {
			t.Fatal(err)
		}
		_ = env.client.DestroySandbox(ctx, sb.ID)
		if i%2 == 1 {
			inet = append(inet, d)
		} else {
			none = append(none, d)
		}
	}
	med := func(d []time.Duration) time.Duration {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return d[len(d)/2]
	}
	t.Logf("create (busybox, median of %d): egress none %v, internet %v", n, med(none), med(inet))
}

// hostListener listens on every host address on a free port that accepts
// and closes connections, for the tests' "the host is unreachable"
// probes (a connect that succeeds is a hole), and returns the port.
func hostListener(t *testing.T) string {
	t.Helper()
	ln := serveTCP(t, "tcp4", "0.0.0.0:0", func(c net.Conn) { c.Close() })
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
