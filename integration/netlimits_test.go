package integration

// Per-sandbox connection and bandwidth limits (docs/network.md), proved
// against servers in the test internet: the host-side counts and timings
// are the verdict.

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
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/network"
)

// listenIn opens TCP listeners on addrs inside network namespace ns (a
// name under /var/run/netns).
func listenIn(t *testing.T, ns string, addrs ...string) []net.Listener {
	t.Helper()
	type res struct {
		ls  []net.Listener
		err error
	}
	ch := make(chan res, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		var r res
		fd, err := unix.Open(filepath.Join("/var/run/netns", ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		for _, a := range addrs {
			if err != nil {
				break
			}
			var l net.Listener
			if l, err = net.Listen("tcp4", a); err == nil {
				r.ls = append(r.ls, l)
			}
		}
		r.err = err
		ch <- r
	}()
	r := <-ch
	if r.err != nil {
		t.Fatalf("listening in %s: %v", ns, r.err)
	}
	for _, l := range r.ls {
		t.Cleanup(func() { l.Close() })
	}
	return r.ls
}

// limitServers are the test internet's servers for the limits: an HTTP
// server on web (GET /bytes?n=N sends N bytes; POST /sink reads the body
// and answers "BYTES SECONDS", timed from its first byte to its end) and
// a TCP server on hold that keeps every connection open until the client
// closes it, counting those open.
type limitServers struct {
	web, hold string
	open      atomic.Int64
	accepted  atomic.Int64
}

func newLimitServers(t *testing.T, ti *testInternet) *limitServers {
	ls := listenIn(t, ti.ns, ti.pub+":9090", ti.pub+":9091")
	s := &limitServers{web: ti.pub + ":9090", hold: ti.pub + ":9091"}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /bytes", func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		w.Header().Set("Content-Length", strconv.Itoa(n))
		buf := make([]byte, 64<<10)
		for n > 0 {
			k, err := w.Write(buf[:min(n, len(buf))])
			if err != nil {
				return
			}
			n -= k
		}
	})
	mux.HandleFunc("POST /sink", func(w http.ResponseWriter, r *http.Request) {
		buf := make([]byte, 64<<10)
		var n int64
		var t0 time.Time
		for {
			k, err := r.Body.Read(buf)
			if k > 0 && t0.IsZero() {
				t0 = time.Now()
			}
			n += int64(k)
			if err != nil {
				break
			}
		}
		fmt.Fprintf(w, "%d %.3f", n, time.Since(t0).Seconds())
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ls[0])
	t.Cleanup(func() { srv.Close() })
	go func() {
		for {
			c, err := ls[1].Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			s.open.Add(1)
			go func() {
				io.Copy(io.Discard, c)
				c.Close()
				s.open.Add(-1)
			}()
		}
	}()
	return s
}

// uploadScript puts testdata/network/limits.py at /tmp/limits.py in id.
func uploadLimitsScript(t *testing.T, id string) {
	t.Helper()
	src, err := os.Open(filepath.Join("testdata", "network", "limits.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := env.client.WriteFile(context.Background(), id, "/tmp/limits.py", src, 0o644); err != nil {
		t.Fatal(err)
	}
}

// limitsPy runs limits.py with args in id and returns its output lines as
// "key" -> "rest".
func limitsPy(t *testing.T, id string, args ...string) map[string]string {
	t.Helper()
	res := execReq(t, id, api.ExecRequest{Cmd: append([]string{"python3", "/tmp/limits.py"}, args...), TimeoutMs: 120000})
	if res.ExitCode != 0 {
		t.Fatalf("limits.py %v exited %d: %s%s", args, res.ExitCode, res.Stdout, res.Stderr)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		out[k] = v
	}
	return out
}

// checkConnLimit holds limit connections from id to the hold server and
// checks, on the server, that one more never arrives while they are open
// and that one does once a slot is free.
func checkConnLimit(t *testing.T, id string, s *limitServers, limit int) {
	t.Helper()
	before := s.accepted.Load()
	host, port, _ := strings.Cut(s.hold, ":")
	out := limitsPy(t, id, "conns", host, port, strconv.Itoa(limit))
	if out["held"] != strconv.Itoa(limit) {
		t.Errorf("held %q connections, want %d", out["held"], limit)
	}
	if !strings.HasPrefix(out["extra"], "refused:") {
		t.Errorf("connection %d of a limit of %d: %q, want refused", limit+1, limit, out["extra"])
	}
	if out["after_close"] != "connected" {
		t.Errorf("after closing one: %q, want connected", out["after_close"])
	}
	// The host's side: limit, then one after the close; never limit+1 at
	// once (the extra one never arrived).
	if got := s.accepted.Load() - before; got != int64(limit)+1 {
		t.Errorf("the server accepted %d connections, want %d (%d held, then one after a close)", got, limit+1, limit)
	}
}

// rate parses "BYTES SECONDS" and returns bytes per second.
func rate(t *testing.T, what, s string) float64 {
	t.Helper()
	f := strings.Fields(s)
	if len(f) != 2 {
		t.Fatalf("%s: %q", what, s)
	}
	n, _ := strconv.ParseFloat(f[0], 64)
	sec, _ := strconv.ParseFloat(f[1], 64)
	if n == 0 || sec <= 0 {
		t.Fatalf("%s: %q", what, s)
	}
	return n / sec
}

// checkBandwidth times a download and an upload of size bytes between id
// and the web server and checks both against mbit.
func checkBandwidth(t *testing.T, id string, s *limitServers, mbit, size int) {
	t.Helper()
	want := float64(mbit) * 1e6 / 8
	down := rate(t, "download", limitsPy(t, id, "down", fmt.Sprintf("http://%s/bytes?n=%d", s.web, size))["down"])
	host, port, _ := strings.Cut(s.web, ":")
	up := rate(t, "upload", limitsPy(t, id, "up", host, port, strconv.Itoa(size))["up"])
	t.Logf("limit %d Mbit/s: download %.2f Mbit/s, upload %.2f Mbit/s (%d bytes each)", mbit, down*8/1e6, up*8/1e6, size)
	// Wide margins (a loaded 2-core host): the point is that the rate is
	// near the limit, not the line rate of a veth (gigabits).
	for _, r := range []struct {
		what string
		v    float64
	}{{"download", down}, {"upload", up}} {
		if r.v < 0.4*want || r.v > 1.35*want {
			t.Errorf("%s at %.2f Mbit/s, want about %d (0.4x to 1.35x)", r.what, r.v*8/1e6, mbit)
		}
	}
}

// nftHasConnLimit reports whether this daemon's table limits connections
// from sandbox id: the jump from the forward chain and the rule in the
// sandbox's chain lim-<id>. Either one left alone after destroy counts.
func nftHasConnLimit(t *testing.T, id string) bool {
	fwd, _ := exec.Command("nft", "list", "chain", "inet", env.cfg.CgroupParent, "forward").Output()
	lim, _ := exec.Command("nft", "list", "chain", "inet", env.cfg.CgroupParent, "lim-"+id).Output()
	return strings.Contains(string(fwd), "jump lim-"+id) || strings.Contains(string(lim), "ct count")
}

// TestNetworkLimits: a sandbox limited to 4 connections cannot open a 5th
// while 4 are open; an 8 Mbit/s limit holds both ways; limits change at
// runtime; destroy leaves no qdisc, ifb device or rule.
func TestNetworkLimits(t *testing.T) {
	needBase(t)
	ti := newTestInternet(t)
	s := newLimitServers(t, ti)
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{
		Egress: api.EgressInternet, MaxConnections: 4, BandwidthMbit: 8}})
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if sb.Network.MaxConnections != 4 || sb.Network.BandwidthMbit != 8 {
		t.Fatalf("network %+v, want max_connections 4, bandwidth_mbit 8", sb.Network)
	}
	shaping, err := network.Shaping(id)
	if want := []string{"veth tbf rate=1000000", "veth ingress", "ifb tbf rate=1000000"}; err != nil || !slices.Equal(shaping, want) {
		t.Fatalf("shaping %v (%v), want %v", shaping, err, want)
	}
	fwd, _ := exec.Command("nft", "list", "chain", "inet", env.cfg.CgroupParent, "forward").Output()
	lim, _ := exec.Command("nft", "list", "chain", "inet", env.cfg.CgroupParent, "lim-"+id).Output()
	if !strings.Contains(string(fwd), "jump lim-"+id) || !strings.Contains(string(lim), "ct count over 4") {
		t.Fatalf("no connection limit for the sandbox: forward:\n%s\nlim-%s:\n%s", fwd, id, lim)
	}
	uploadLimitsScript(t, id)

	t.Run("connections", func(t *testing.T) { checkConnLimit(t, id, s, 4) })
	t.Run("bandwidth", func(t *testing.T) { checkBandwidth(t, id, s, 8, 3_000_000) })
	t.Run("runtime", func(t *testing.T) {
		// The CLI lifts the bandwidth limit and raises the connection limit.
		if _, stderr, code := cli(t, "", "egress", id, "--bandwidth", "-1", "--max-connections", "16"); code != 0 {
			t.Fatalf("agentbox egress: %s", stderr)
		}
		if got, _ := network.Shaping(id); len(got) != 0 {
			t.Errorf("shaping after --bandwidth -1: %v, want none", got)
		}
		if _, err := netlink.LinkByName(network.IfbName(id)); err == nil {
			t.Errorf("ifb device %s is left after --bandwidth -1", network.IfbName(id))
		}
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil || sb.Network.MaxConnections != 16 || sb.Network.BandwidthMbit != -1 || sb.Network.Egress != api.EgressInternet {
			t.Fatalf("after the change: %+v, %v", sb.Network, err)
		}
		host, port, _ := strings.Cut(s.hold, ":")
		if out := limitsPy(t, id, "conns", host, port, "4"); out["extra"] != "connected" {
			t.Errorf("a 5th connection under a limit of 16: %q", out["extra"])
		}
		// The SDK sets a new bandwidth, keeping the policy.
		if _, err := env.client.SetNetworkLimits(ctx, id, 0, 2); err != nil {
			t.Fatal(err)
		}
		if got, _ := network.Shaping(id); !slices.Contains(got, "veth tbf rate=250000") || !slices.Contains(got, "ifb tbf rate=250000") {
			t.Errorf("shaping after SetNetworkLimits(0, 2): %v", got)
		}
	})
	t.Run("restart", func(t *testing.T) {
		// A restarted daemon rebuilds its table: the limits come back.
		restartDaemon(t, func() {})
		if !nftHasConnLimit(t, id) {
			t.Error("no connection limit rule after a daemon restart")
		}
		if got, _ := network.Shaping(id); !slices.Contains(got, "veth tbf rate=250000") || !slices.Contains(got, "ifb tbf rate=250000") {
			t.Errorf("shaping after a daemon restart: %v", got)
		}
		host, port, _ := strings.Cut(s.hold, ":")
		if out := limitsPy(t, id, "conns", host, port, "4"); out["extra"] != "connected" || out["held"] != "4" {
			t.Errorf("after a restart, under a limit of 16: %v", out)
		}
	})
	t.Run("defaults and validation", func(t *testing.T) {
		d := newSandbox(t, api.CreateSandboxRequest{Template: "busybox", Network: &api.Network{Egress: api.EgressInternet}})
		sb, _ := env.client.GetSandbox(ctx, d)
		if sb.Network.MaxConnections != env.cfg.Network.MaxConnections || sb.Network.BandwidthMbit != -1 {
			t.Errorf("defaults: %+v, want max_connections %d, bandwidth_mbit -1", sb.Network, env.cfg.Network.MaxConnections)
		}
		if got, _ := network.Shaping(d); len(got) != 0 {
			t.Errorf("shaping without a bandwidth limit: %v", got)
		}
		for _, n := range []*api.Network{
			{Egress: api.EgressNone, MaxConnections: 4},
			{Egress: api.EgressInternet, BandwidthMbit: -5},
		} {
			_, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Network: n})
			if err == nil || !strings.Contains(err.Error(), "network.") {
				t.Errorf("create with %+v: %v, want a network.* error", n, err)
			}
		}
	})
	t.Run("destroy", func(t *testing.T) {
		if err := env.client.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{network.HostVeth(id), network.IfbName(id)} {
			if _, err := netlink.LinkByName(name); err == nil {
				t.Errorf("%s is left after destroy (with its qdiscs)", name)
			}
		}
		if nftHasConnLimit(t, id) {
			t.Error("the connection limit rule is left after destroy")
		}
	})
}
