package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/api"
)

// testWeb is a second test "internet" for domain rules: a network
// namespace reached from the host through a veth in 198.19.N.0/24, with
// web hosts at .2, .3, .4 and .5 (HTTP on 80 and 8080, HTTPS on 443 with a test CA,
// answering "hello <name> at <addr>") and a DNS server at .53 (UDP and
// TCP) that the test daemon uses as its upstream (main_test.go). It is
// made once per test process and removed when the tests end; everything
// it serves and every name it was asked is recorded for host-side
// verdicts.
var testWeb = struct {
	once sync.Once
	err  error

	n                      int
	ns, hostIf             string
	hostAddr, dnsAddr      string
	web1, web2, web3, bare string // .2, .3, .4 named hosts; .5 has no name
	caPEM                  []byte

	mu       sync.Mutex
	dnsSeen  []string // "NAME TYPE" of every query
	webSeen  []string // "HOST PATH BODY" of every request
	zone     map[string]string
	servers  []io.Closer
	unlocked bool
}{n: int(mustRandByte()) % 250}

func mustRandByte() byte {
	var b [1]byte
	_, _ = rand.Read(b[:])
	return b[0]
}

// testDNSUpstream is the address of testWeb's DNS server, the test
// daemon's dns_upstream.
func testDNSUpstream() string { return fmt.Sprintf("198.19.%d.53:53", testWeb.n) }

// The names testWeb's DNS server knows.
const (
	nameAllowed = "allowed.test"   // web1
	nameDenied  = "denied.test"    // web1 too: the IP an allowed name resolved to
	nameWildA   = "api.wild.test"  // web2
	nameWildX   = "x.wild.test"    // web2
	nameWildNo  = "deny.wild.test" // web2, denied by a more specific rule
	nameOther   = "other.test"     // web3
)

// needTestWeb builds testWeb once.
func needTestWeb(t testing.TB) {
	t.Helper()
	testWeb.once.Do(func() { testWeb.err = setupTestWeb() })
	if testWeb.err != nil {
		t.Fatalf("test web: %v", testWeb.err)
	}
}

func setupTestWeb() error {
	w := &testWeb
	sfx := randHex(2)
	w.ns, w.hostIf = "abx-it-web-"+sfx, "itw"+sfx
	p := fmt.Sprintf("198.19.%d.", w.n)
	w.hostAddr, w.web1, w.web2, w.web3, w.bare = p+"1", p+"2", p+"3", p+"4", p+"5"
	w.dnsAddr = p + "53"
	w.zone = map[string]string{nameAllowed: w.web1, nameDenied: w.web1, nameWildA: w.web2, nameWildX: w.web2,
		nameWildNo: w.web2, nameOther: w.web3}
	run := func(args ...string) error {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	steps := [][]string{
		{"netns", "add", w.ns},
		{"link", "add", w.hostIf, "type", "veth", "peer", "name", "eth0", "netns", w.ns},
		{"addr", "add", w.hostAddr + "/24", "dev", w.hostIf},
		{"link", "set", w.hostIf, "up"},
		{"-n", w.ns, "link", "set", "lo", "up"},
		{"-n", w.ns, "link", "set", "eth0", "up"},
	}
	for _, a := range []string{w.web1, w.web2, w.web3, w.bare, w.dnsAddr} {
		steps = append(steps, []string{"-n", w.ns, "addr", "add", a + "/24", "dev", "eth0"})
	}
	steps = append(steps, []string{"-n", w.ns, "route", "add", "default", "via", w.hostAddr})
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	cert, caPEM, err := testCA(w.zone)
	if err != nil {
		return err
	}
	w.caPEM = caPEM
	// Sockets made on a thread inside the namespace stay there.
	type socks struct {
		http, https, alt, dnsTCP net.Listener
		dnsUDP                   net.PacketConn
	}
	got := make(chan socks, 1)
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		fd, err := unix.Open(filepath.Join("/var/run/netns", w.ns), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		var s socks
		if err == nil {
			s.http, err = net.Listen("tcp4", ":80")
		}
		if err == nil {
			s.https, err = net.Listen("tcp4", ":443")
		}
		if err == nil {
			s.alt, err = net.Listen("tcp4", ":8080")
		}
		if err == nil {
			s.dnsTCP, err = net.Listen("tcp4", w.dnsAddr+":53")
		}
		if err == nil {
			s.dnsUDP, err = net.ListenPacket("udp4", w.dnsAddr+":53")
		}
		errc <- err
		got <- s
	}()
	if err := <-errc; err != nil {
		return fmt.Errorf("listening in the test web: %w", err)
	}
	s := <-got
	web := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 4096))
		w.mu.Lock()
		w.webSeen = append(w.webSeen, r.Host+" "+r.URL.Path+" "+string(body))
		w.mu.Unlock()
		host, _, _ := strings.Cut(r.Host, ":")
		fmt.Fprintf(rw, "hello %s at %s", host, r.Context().Value(http.LocalAddrContextKey))
	})
	h1 := &http.Server{Handler: web}
	h3 := &http.Server{Handler: web}
	go h3.Serve(s.alt)
	h2 := &http.Server{Handler: web, TLSConfig: &tls.Config{Certificates: []tls.Certificate{cert}}}
	go h1.Serve(s.http)
	go h2.ServeTLS(s.https, "", "")
	d1 := &dns.Server{Listener: s.dnsTCP, Handler: dns.HandlerFunc(serveTestDNS)}
	d2 := &dns.Server{PacketConn: s.dnsUDP, Handler: dns.HandlerFunc(serveTestDNS)}
	go d1.ActivateAndServe()
	go d2.ActivateAndServe()
	w.servers = []io.Closer{h1, h2, h3, closerFunc(d1.Shutdown), closerFunc(d2.Shutdown)}
	return nil
}

type closerFunc func() error

func (f closerFunc) Close() error { return f() }

// serveTestDNS answers A (TTL 60) and TXT queries for the zone's names,
// NXDOMAIN for others, and records every query.
func serveTestDNS(rw dns.ResponseWriter, r *dns.Msg) {
	w := &testWeb
	m := new(dns.Msg)
	m.SetReply(r)
	if len(r.Question) != 1 {
		m.Rcode = dns.RcodeFormatError
		_ = rw.WriteMsg(m)
		return
	}
	q := r.Question[0]
	name := strings.TrimSuffix(strings.ToLower(q.Name), ".")
	w.mu.Lock()
	w.dnsSeen = append(w.dnsSeen, name+" "+dns.TypeToString[q.Qtype])
	ip, ok := w.zone[name]
	w.mu.Unlock()
	switch {
	case !ok:
		m.Rcode = dns.RcodeNameError
	case q.Qtype == dns.TypeA:
		m.Answer = append(m.Answer, &dns.A{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 60}, A: net.ParseIP(ip)})
	case q.Qtype == dns.TypeTXT:
		m.Answer = append(m.Answer, &dns.TXT{Hdr: dns.RR_Header{Name: q.Name, Rrtype: dns.TypeTXT, Class: dns.ClassINET, Ttl: 60}, Txt: []string{"test"}})
	}
	_ = rw.WriteMsg(m)
}

// testWebSeen returns what testWeb's DNS server and web servers saw.
func testWebSeen() (queries, requests string) {
	testWeb.mu.Lock()
	defer testWeb.mu.Unlock()
	return strings.Join(testWeb.dnsSeen, "\n"), strings.Join(testWeb.webSeen, "\n")
}

// cleanupTestWeb removes testWeb, if it was made (main_test.go).
func cleanupTestWeb() {
	w := &testWeb
	if w.ns == "" {
		return
	}
	for _, s := range w.servers {
		_ = s.Close()
	}
	_ = exec.Command("ip", "link", "del", w.hostIf).Run()
	_ = exec.Command("ip", "netns", "del", w.ns).Run()
}

// testCA makes a CA and a server certificate for the zone's names and
// wildcards, and returns the certificate and the CA in PEM.
func testCA(zone map[string]string) (tls.Certificate, []byte, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	now := time.Now()
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentbox test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	var names []string
	for n := range zone {
		names = append(names, n)
	}
	tpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "test web"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: names,
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key},
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), nil
}

// probeEgress uploads egress_probe.py and the test CA into sandbox id,
// runs the probes and returns each one's verdict.
func probeEgress(t *testing.T, id string, probes ...string) map[string]string {
	t.Helper()
	ctx := context.Background()
	src, err := os.ReadFile(filepath.Join("testdata", "network", "egress_probe.py"))
	if err != nil {
		t.Fatal(err)
	}
	for path, b := range map[string][]byte{"/tmp/probe.py": src, "/tmp/ca.pem": testWeb.caPEM} {
		if _, err := env.client.WriteFile(ctx, id, path, strings.NewReader(string(b)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	res := execReq(t, id, api.ExecRequest{Cmd: append([]string{"python3", "/tmp/probe.py"}, probes...), TimeoutMs: 120000})
	if res.ExitCode != 0 {
		t.Fatalf("egress_probe.py exited %d: %s", res.ExitCode, res.Stderr)
	}
	if testing.Verbose() {
		t.Logf("probe timings:\n%s", res.Stderr)
	}
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(res.Stdout), "\n") {
		k, v, _ := strings.Cut(l, " ")
		out[k] = v
	}
	return out
}

// probeWant is a probe of egress_probe.py and the prefix its verdict
// must have.
type probeWant struct{ probe, want string }

// expectProbes runs the probes in order (a connection to an address
// needs the resolution before it) and checks their verdicts.
func expectProbes(t *testing.T, id string, want []probeWant) map[string]string {
	t.Helper()
	var probes []string
	for _, p := range want {
		probes = append(probes, p.probe)
	}
	got := probeEgress(t, id, probes...)
	for _, p := range want {
		if !strings.HasPrefix(got[p.probe], p.want) {
			t.Errorf("%s: %q, want %q...", p.probe, got[p.probe], p.want)
		}
	}
	return got
}

// TestEgressDomains proves domain rules against testWeb: allowed names
// resolve and connect, denied names fail at DNS and at connect, wildcards
// and the most specific rule, an allowed IP reused with a denied SNI or
// Host fails, direct DNS and DoT fail, runtime changes, the egress log
// (API and CLI), and that destroy leaves no set, chain or listener.
func TestEgressDomains(t *testing.T) {
	needBase(t)
	needTestWeb(t)
	h, err := env.client.Health(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for i, tier := range testTiers(h.Drivers) {
		t.Run(tier, func(t *testing.T) { egressDomains(t, tier, i == 0) })
	}
}

// egressDomains is TestEgressDomains on one tier; restart also restarts
// the daemon (once per run is enough: the tiers share the daemon's side).
func egressDomains(t *testing.T, tier string, restart bool) {
	w := &testWeb
	ctx := context.Background()
	id := newSandbox(t, api.CreateSandboxRequest{Template: "base", Isolation: tier, Network: &api.Network{Egress: api.EgressCustom,
		Allow: []string{nameAllowed, "*.wild.test"}, Deny: []string{nameWildNo}}})
	if rc := string(readAll(t, id, "/etc/resolv.conf")); !strings.Contains(rc, "nameserver 10.201.") {
		t.Fatalf("resolv.conf does not name the sandbox's resolver:\n%s", rc)
	}
	hello := func(name, ip string) string { return "ok:hello_" + name + "_at_" + ip }

	t.Run("rules", func(t *testing.T) {
		before, _ := testWebSeen()
		keepAlive := "keepalive:" + nameAllowed + "," + nameAllowed + "@" + w.web1
		got := expectProbes(t, id, []probeWant{
			{"resolve:" + nameAllowed, "ok:" + w.web1},
			{"resolve:" + nameWildA, "ok:" + w.web2},
			{"resolve:" + nameWildNo, "err:"}, // the more specific deny wins
			{"resolve:" + nameDenied, "err:"},
			{"resolve:" + nameOther, "err:"},
			{"resolve:wild.test", "err:"}, // *.wild.test is its subdomains only
			{"https:" + nameAllowed, hello(nameAllowed, w.web1)},
			{"http:" + nameAllowed, hello(nameAllowed, w.web1)},
			{"https:" + nameWildA, hello(nameWildA, w.web2)},
			{"https:" + nameWildX + "@" + w.web2, hello(nameWildX, w.web2)},
			{"https:" + nameDenied + "@" + w.web1, "err:"}, // the allowed IP with a denied SNI
			{"http:" + nameDenied + "@" + w.web1, "err:HTTP/1.1_403"},
			// every request of a kept-alive connection is checked, not
			// only the first: the denied second one never reaches web1
			{keepAlive, hello(nameAllowed, w.web1)}, // and a second hello, below
			{"keepalive:" + nameAllowed + "," + nameDenied + "," + nameAllowed + "@" + w.web1, "err:1:HTTP/1.1_403"},
			// pipelined: the answers before the denied request still come
			{"pipeline:" + nameAllowed + "," + nameAllowed + "," + nameDenied + "@" + w.web1, "err:2:HTTP/1.1_403"},
			{"https:" + nameWildNo + "@" + w.web2, "err:"},
			{"https:" + nameOther + "@" + w.web3, "err:"}, // a name no rule allows
			{"https:" + nameWildX + "@" + w.web3, "err:"}, // allowed, but web3 was not resolved for it
			{"http:" + w.web3 + "@" + w.web3, "err:HTTP/1.1_403"},
			{"tcp:" + w.web1 + ":8080", "ok:"}, // pinned: any port
			{"tcp:" + w.web3 + ":8080", "err:"},
			{"tcp:" + w.bare + ":8080", "err:"},
			{"dns:" + w.dnsAddr + ":" + nameAllowed, "err:"}, // direct DNS, UDP
			{"dnstcp:" + w.dnsAddr + ":" + nameAllowed, "err:"},
			{"dot:" + w.dnsAddr, "err:"},
			{"query:" + nameAllowed + ":TXT", "ok:rcode=0"},
			{"query:" + nameDenied + ":TXT", "ok:rcode=3"},
			{"query:" + nameAllowed + ":AAAA", "ok:rcode=0"},
		})
		if n := strings.Count(got[keepAlive], "hello_"+nameAllowed); n != 2 {
			t.Errorf("%s: %q, want two answers on one connection", keepAlive, got[keepAlive])
		}
		// What this sandbox asked: denied names never reach the upstream.
		queries, requests := testWebSeen()
		if strings.Contains(requests, nameDenied+" /keepalive") {
			t.Errorf("a denied later request on a kept-alive connection reached the web server:\n%s", requests)
		}
		queries = strings.TrimPrefix(queries, before)
		for _, n := range []string{nameDenied, nameOther, nameWildNo} {
			if strings.Contains(queries, n+" ") {
				t.Errorf("the upstream was asked for denied name %s:\n%s", n, queries)
			}
		}
	})

	t.Run("latency", func(t *testing.T) {
		// docs/network.md quotes these: a resolution through the
		// sandbox's resolver (to the test upstream), and an HTTP GET on
		// a new connection through the Host proxy (port 80) and straight
		// through the firewall (8080, the pinned address).
		got := expectProbes(t, id, []probeWant{
			{"timeresolve:" + nameAllowed + ":50", "ok:"},
			{"timeget:" + nameAllowed + "@" + w.web1 + ":80:50", "ok:"},
			{"timeget:" + nameAllowed + "@" + w.web1 + ":8080:50", "ok:"},
		})
		t.Logf("resolve %s; GET via the proxy %s; GET direct %s", got["timeresolve:"+nameAllowed+":50"],
			got["timeget:"+nameAllowed+"@"+w.web1+":80:50"], got["timeget:"+nameAllowed+"@"+w.web1+":8080:50"])
	})

	t.Run("log", func(t *testing.T) {
		l, err := env.client.EgressLog(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		find := func(kind, name, verdict, reason string) bool {
			for _, e := range l.Entries {
				if e.Kind == kind && e.Name == name && e.Verdict == verdict && strings.Contains(e.Reason, reason) && e.Dest != "" && !e.Time.IsZero() {
					return true
				}
			}
			return false
		}
		for _, c := range []struct{ kind, name, verdict, reason string }{
			{api.EgressKindDNS, nameAllowed, api.VerdictAllow, "allow " + nameAllowed},
			{api.EgressKindDNS, nameWildA, api.VerdictAllow, "allow *.wild.test"},
			{api.EgressKindDNS, nameWildNo, api.VerdictDeny, "deny " + nameWildNo},
			{api.EgressKindDNS, nameDenied, api.VerdictDeny, "no allow rule"},
			{api.EgressKindConnect, nameAllowed, api.VerdictAllow, "resolved for " + nameAllowed},
			{api.EgressKindConnect, nameDenied, api.VerdictDeny, "no allow rule"},
			{api.EgressKindConnect, nameDenied, api.VerdictDeny, "a later request on a kept-alive connection"},
			{api.EgressKindConnect, nameOther, api.VerdictDeny, "no allow rule"},
			{api.EgressKindConnect, nameWildX, api.VerdictDeny, "not resolved"},
			// decided by the firewall, read back over NFLOG
			{api.EgressKindConnect, nameAllowed, api.VerdictAllow, "firewall: address resolved for an allowed name"},
			{api.EgressKindConnect, "", api.VerdictDeny, "firewall: egress custom"},
			{api.EgressKindConnect, "", api.VerdictDeny, "firewall: DNS to another server"},
		} {
			if !find(c.kind, c.name, c.verdict, c.reason) {
				t.Errorf("no %s entry %s %s (%s) in the egress log", c.kind, c.name, c.verdict, c.reason)
			}
		}
		if t.Failed() {
			for _, e := range l.Entries {
				t.Logf("%+v", e)
			}
		}
		out, stderr, code := cli(t, "", "egress", "log", id)
		if code != 0 || !strings.Contains(out, "VERDICT") || !strings.Contains(out, nameDenied) {
			t.Errorf("agentbox egress log: %d %s %s", code, out, stderr)
		}
	})

	t.Run("runtime", func(t *testing.T) {
		if _, err := env.client.SetEgress(ctx, id, api.EgressCustom, []string{nameOther}, nil); err != nil {
			t.Fatal(err)
		}
		expectProbes(t, id, []probeWant{
			{"resolve:" + nameOther, "ok:" + w.web3},
			{"https:" + nameOther, hello(nameOther, w.web3)},
			{"resolve:" + nameAllowed, "err:"},
			{"https:" + nameAllowed + "@" + w.web1, "err:"}, // its pin went with the rule
			{"tcp:" + w.web1 + ":8080", "err:"},
			{"tcp:" + w.web3 + ":8080", "ok:"},
		})
		// egress internet with a domain deny: other names need no rule,
		// the denied one fails even on an address another name resolved to.
		if _, stderr, code := cli(t, "", "egress", id, "--egress", "internet", "--deny", nameDenied); code != 0 {
			t.Fatalf("agentbox egress: %s", stderr)
		}
		expectProbes(t, id, []probeWant{
			{"https:" + nameAllowed, hello(nameAllowed, w.web1)},
			{"https:" + nameDenied + "@" + w.web1, "err:"},
			{"resolve:" + nameDenied, "err:"},
			{"http:" + w.bare + "@" + w.bare, "ok:"}, // an address as Host: the address rules decide
			{"dns:" + w.dnsAddr + ":" + nameAllowed, "err:"},
		})
	})

	t.Run("restart", func(t *testing.T) {
		// A restarted daemon rebuilds the table, the set and the
		// redirects, and listens on the gateway again; pins are gone
		// until the sandbox resolves again.
		if !restart {
			return
		}
		restartDaemon(t, func() {})
		expectProbes(t, id, []probeWant{
			{"resolve:" + nameDenied, "err:"},
			{"https:" + nameAllowed, hello(nameAllowed, w.web1)},
			{"https:" + nameDenied + "@" + w.web1, "err:"},
			{"dns:" + w.dnsAddr + ":" + nameAllowed, "err:"},
		})
	})

	t.Run("destroy", func(t *testing.T) {
		sb, err := env.client.GetSandbox(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		addr, _, _ := strings.Cut(sb.Network.Address, "/")
		gw := addr[:strings.LastIndex(addr, ".")+1] + fmt.Sprint(lastOctet(addr)-1)
		if err := env.client.DestroySandbox(ctx, id); err != nil {
			t.Fatal(err)
		}
		out, _ := exec.Command("nft", "list", "table", "inet", env.cfg.CgroupParent).CombinedOutput()
		if strings.Contains(string(out), id) {
			t.Errorf("the nftables table still names %s after destroy:\n%s", id, out)
		}
		ss, _ := exec.Command("ss", "-Hlntu").CombinedOutput()
		if strings.Contains(string(ss), gw+":") {
			t.Errorf("a listener on the gateway %s is left after destroy:\n%s", gw, ss)
		}
		if l, err := env.client.EgressLog(ctx, id); err == nil && len(l.Entries) > 0 {
			t.Errorf("the egress log of a destroyed sandbox still has %d entries", len(l.Entries))
		}
	})
}
