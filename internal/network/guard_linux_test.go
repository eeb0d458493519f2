package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// testUpstream is a DNS server on loopback that answers A queries from
// zone and NXDOMAIN otherwise, and remembers every name it was asked.
type testUpstream struct {
	addr string
	mu   sync.Mutex
	seen []string
}

func newTestUpstream(t *testing.T, zone map[string]string) *testUpstream {
	t.Helper()
	pc, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	u := &testUpstream{addr: pc.LocalAddr().String()}
	srv := &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) {
		m := new(dns.Msg)
		m.SetReply(r)
		q := r.Question[0]
		u.mu.Lock()
		u.seen = append(u.seen, CanonicalName(q.Name))
		u.mu.Unlock()
		if ip, ok := zone[CanonicalName(q.Name)]; ok && q.Qtype == dns.TypeA {
			m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 5}, A: net.ParseIP(ip)})
		} else if !ok {
			m.Rcode = dns.RcodeNameError
		}
		_ = w.WriteMsg(m)
	})}
	go srv.ActivateAndServe()
	t.Cleanup(func() { _ = srv.Shutdown() })
	return u
}

func (u *testUpstream) asked() string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return strings.Join(u.seen, ",")
}

// inNetns runs f on a thread in the network namespace of pid.
func inNetns(t *testing.T, pid int, f func()) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err == nil {
			f()
		}
		done <- err
	}()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func nftList(args ...string) string {
	out, _ := exec.Command("nft", append([]string{"list"}, args...)...).CombinedOutput()
	return string(out)
}

// TestGuard attaches a network namespace with domain rules and proves
// the resolver answers only allowed names, pins their answers into the
// set, drops them when the policy changes, logs each query, and that
// detach leaves no set, chain or listener.
func TestGuard(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace, a veth and an nftables table")
	}
	sfx := make([]byte, 3)
	_, _ = rand.Read(sfx)
	name := "abx-ut-" + hex.EncodeToString(sfx)
	up := newTestUpstream(t, map[string]string{"allowed.test": "198.51.100.7", "a.wild.test": "198.51.100.8", "no.wild.test": "198.51.100.9"})
	m, err := NewManager(name, fmt.Sprintf("10.203.%d.0/24", sfx[0]), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.SetUpstreams([]string{up.addr}); err != nil {
		t.Fatal(err)
	}
	if err := m.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", name).Run() })
	sbx := exec.Command("unshare", "-n", "sleep", "120")
	if err := sbx.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sbx.Process.Kill(); _ = sbx.Wait() })
	time.Sleep(100 * time.Millisecond) // unshare has exec'd sleep
	id := hex.EncodeToString(sfx) + "abcdef"
	pol, err := ParsePolicy(api.EgressCustom, []string{"allowed.test", "*.wild.test"}, []string{"no.wild.test"})
	if err != nil {
		t.Fatal(err)
	}
	ta := time.Now()
	sub, err := m.Attach(id, sbx.Process.Pid, pol, Subnet{}, Limits{})
	t.Logf("attach took %v", time.Since(ta))
	if err != nil {
		t.Fatal(err)
	}
	// A guard stopped right after it started stops (a DNS server shut
	// down before it ran used to keep serving, and Detach hung).
	for i := 0; i < 3; i++ {
		t0 := time.Now()
		m.stopGuard(id)
		t1 := time.Now()
		if err := m.startGuard(id, sub, pol); err != nil {
			t.Fatal(err)
		}
		t.Logf("stopGuard %v startGuard %v", t1.Sub(t0), time.Since(t1))
	}
	resolver := net.JoinHostPort(sub.Gateway.String(), "53")
	query := func(qname, netw string) (int, []string, error) {
		var rcode int
		var ips []string
		var qerr error
		inNetns(t, sbx.Process.Pid, func() {
			c := &dns.Client{Net: netw, Timeout: 3 * time.Second}
			q := new(dns.Msg)
			q.SetQuestion(dns.Fqdn(qname), dns.TypeA)
			r, _, err := c.Exchange(q, resolver)
			if err != nil {
				qerr = err
				return
			}
			rcode = r.Rcode
			for _, rr := range r.Answer {
				if a, ok := rr.(*dns.A); ok {
					ips = append(ips, a.A.String())
				}
			}
		})
		return rcode, ips, qerr
	}
	for _, tt := range []struct {
		name, netw string
		rcode      int
		ip         string
	}{
		{"allowed.test", "udp", dns.RcodeSuccess, "198.51.100.7"},
		{"a.wild.test", "tcp", dns.RcodeSuccess, "198.51.100.8"},
		{"no.wild.test", "udp", dns.RcodeNameError, ""},
		{"secret.denied.test", "udp", dns.RcodeNameError, ""},
	} {
		rcode, ips, err := query(tt.name, tt.netw)
		if err != nil || rcode != tt.rcode || strings.Join(ips, ",") != tt.ip {
			t.Errorf("%s over %s: rcode %d, %v, %v; want %d %s", tt.name, tt.netw, rcode, ips, err, tt.rcode, tt.ip)
		}
	}
	if got := up.asked(); got != "allowed.test,a.wild.test" {
		t.Errorf("upstream saw %q, want only the allowed names", got)
	}
	set := nftList("set", "inet", name, resolvedSet(id))
	if !strings.Contains(set, "198.51.100.7") || !strings.Contains(set, "198.51.100.8") || strings.Contains(set, "198.51.100.9") {
		t.Errorf("set after the queries:\n%s", set)
	}
	if !strings.Contains(set, "timeout 30s") {
		t.Errorf("a 5 s TTL is not pinned for MinTTL (30 s):\n%s", set)
	}
	// The policy changes: a.wild.test is denied now; its address goes.
	pol2, _ := ParsePolicy(api.EgressCustom, []string{"allowed.test"}, nil)
	if err := m.SetPolicy(id, pol2); err != nil {
		t.Fatal(err)
	}
	set = nftList("set", "inet", name, resolvedSet(id))
	if !strings.Contains(set, "198.51.100.7") || strings.Contains(set, "198.51.100.8") {
		t.Errorf("set after the policy change:\n%s", set)
	}
	if rcode, _, _ := query("a.wild.test", "udp"); rcode != dns.RcodeNameError {
		t.Errorf("a.wild.test after the change: rcode %d", rcode)
	}
	l := m.EgressLog(id)
	var verdicts []string
	for _, e := range l.Entries {
		verdicts = append(verdicts, e.Name+"="+e.Verdict)
	}
	if got := strings.Join(verdicts, " "); got != "allowed.test=allow a.wild.test=allow no.wild.test=deny secret.denied.test=deny a.wild.test=deny" {
		t.Errorf("egress log: %s", got)
	}
	// Connections the firewall decides reach the log through NFLOG
	// (rejected ones only: an accepted one would leave this machine).
	inNetns(t, sbx.Process.Pid, func() {
		for _, dst := range []string{"10.9.9.9:8080", "192.0.2.99:8080"} {
			if c, err := net.DialTimeout("tcp4", dst, 2*time.Second); err == nil {
				c.Close()
				t.Errorf("%s: connected", dst)
			}
		}
	})
	want := map[string]string{"10.9.9.9:8080": "firewall: private range 10.0.0.0/8", "192.0.2.99:8080": "firewall: egress custom"}
	for deadline := time.Now().Add(3 * time.Second); len(want) > 0 && time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		for _, e := range m.EgressLog(id).Entries {
			if r, ok := want[e.Dest]; ok && e.Kind == api.EgressKindConnect && e.Proto == "tcp" && e.Verdict == api.VerdictDeny && strings.HasPrefix(e.Reason, r) {
				delete(want, e.Dest)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("no firewall entries for %v in the egress log: %+v", want, m.EgressLog(id).Entries)
	}
	t0 := time.Now()
	if err := m.Detach(id); err != nil {
		t.Fatal(err)
	}
	t.Logf("detach took %v", time.Since(t0))
	// Every attached sandbox has a connection count (limits.go), which
	// the service removes with ReleaseLimits when its network goes.
	if err := m.ReleaseLimits(id); err != nil {
		t.Fatal(err)
	}
	if tbl := nftList("table", "inet", name); strings.Contains(tbl, id) {
		t.Errorf("the table still names the sandbox after detach:\n%s", tbl)
	}
	if out, _ := exec.Command("ss", "-Hlntu").CombinedOutput(); strings.Contains(string(out), sub.Gateway.String()+":") {
		t.Errorf("a listener on the gateway is left after detach:\n%s", out)
	}
	if len(m.EgressLog(id).Entries) != 0 {
		t.Error("the egress log outlives detach")
	}
}
