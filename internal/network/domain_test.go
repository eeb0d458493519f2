package network

import (
	"crypto/tls"
	"net"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func TestParsePolicyDomains(t *testing.T) {
	tests := []struct {
		in      string
		domain  string // String() of the parsed domain; "" for an address rule
		wantErr string
	}{
		{in: "example.com", domain: "example.com"},
		{in: "Example.COM.", domain: "example.com"},
		{in: "*.example.org", domain: "*.example.org"},
		{in: "localhost", domain: "localhost"},
		{in: "_dmarc.example.com", domain: "_dmarc.example.com"},
		{in: "10.0.0.0/8"},
		{in: "192.0.2.1"},
		{in: ":443"},
		{in: "a.*.example.com", wantErr: "wildcard may only be the first label"},
		{in: "*", wantErr: "wildcard"},
		{in: "-a.example.com", wantErr: "may not start or end"},
		{in: "a..example.com", wantErr: "1 to 63"},
		{in: "1.2.3.4.5", wantErr: "never numeric"},
		{in: "example.com:443", wantErr: "domain rules take no port"},
		{in: strings.Repeat("a", 64) + ".com", wantErr: "1 to 63"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			p, err := ParsePolicy(api.EgressCustom, []string{tt.in}, nil)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if tt.domain == "" {
				if len(p.Allow) != 1 || len(p.AllowDomains) != 0 {
					t.Fatalf("got %+v, want one address rule", p)
				}
				return
			}
			if len(p.AllowDomains) != 1 || p.AllowDomains[0].String() != tt.domain {
				t.Fatalf("got %+v, want domain %s", p.AllowDomains, tt.domain)
			}
		})
	}
}

func TestNameVerdict(t *testing.T) {
	custom, err := ParsePolicy(api.EgressCustom,
		[]string{"example.com", "*.example.org", "ok.bad.example.org", "*.deep.example.net"},
		[]string{"*.bad.example.org", "example.org", "x.deep.example.net", "10.0.0.0/8"})
	if err != nil {
		t.Fatal(err)
	}
	internet, err := ParsePolicy(api.EgressInternet, []string{"ok.example.com"}, []string{"*.example.com"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		pol  Policy
		name string
		want bool
	}{
		{custom, "example.com", true},
		{custom, "EXAMPLE.com.", true},
		{custom, "www.example.com", false},    // exact rule only
		{custom, "a.example.org", true},       // wildcard
		{custom, "a.b.example.org", true},     // any depth
		{custom, "example.org", false},        // a wildcard does not match its base; deny does
		{custom, "x.bad.example.org", false},  // the longer deny wildcard wins
		{custom, "ok.bad.example.org", true},  // an exact allow beats the deny wildcard
		{custom, "y.deep.example.net", true},  // wildcard allow
		{custom, "x.deep.example.net", false}, // exact deny beats it
		{custom, "example.net", false},        // nothing names it: custom denies
		{internet, "example.net", true},       // internet allows what no rule names
		{internet, "a.example.com", false},
		{internet, "ok.example.com", true},
	}
	for _, tt := range tests {
		got, reason := tt.pol.NameVerdict(tt.name)
		if got != tt.want {
			t.Errorf("%s %s: %v (%s), want %v", tt.pol.Egress, tt.name, got, reason, tt.want)
		}
	}
	// An exact name in both lists: deny wins.
	both, _ := ParsePolicy(api.EgressCustom, []string{"example.com"}, []string{"example.com"})
	if ok, _ := both.NameVerdict("example.com"); ok {
		t.Error("a name both allowed and denied is allowed")
	}
}

func TestPolicyAddr(t *testing.T) {
	pol, err := ParsePolicy(api.EgressCustom, []string{"10.1.0.0/16", "198.51.100.0/24:443"}, []string{"10.1.2.0/24"})
	if err != nil {
		t.Fatal(err)
	}
	pool := netip.MustParsePrefix("10.200.0.0/16")
	tests := []struct {
		addr string
		port uint16
		want AddrVerdict
	}{
		{"10.200.0.5", 80, AddrBlocked},
		{"169.254.169.254", 80, AddrBlocked},
		{"127.0.0.1", 443, AddrBlocked},
		{"10.1.2.3", 80, AddrDenied},
		{"10.1.3.3", 80, AddrAllowed},
		{"10.9.0.1", 80, AddrBlocked}, // private, not named
		{"198.51.100.7", 443, AddrAllowed},
		{"198.51.100.7", 80, AddrDefault},
		{"203.0.113.1", 443, AddrDefault},
	}
	for _, tt := range tests {
		if got, reason := pol.Addr(netip.MustParseAddr(tt.addr), tt.port, pool); got != tt.want {
			t.Errorf("%s:%d: %v (%s), want %v", tt.addr, tt.port, got, reason, tt.want)
		}
	}
}

// TestReadClientHello parses the ClientHello crypto/tls sends.
func TestReadClientHello(t *testing.T) {
	for _, name := range []string{"www.example.com", ""} {
		a, b := net.Pipe()
		go func() {
			c := tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true})
			_ = c.Handshake()
		}()
		raw, got, err := readClientHello(b)
		a.Close()
		b.Close()
		if err != nil {
			t.Fatalf("%q: %v", name, err)
		}
		if got != name || len(raw) < 100 {
			t.Errorf("server name %q (%d bytes read), want %q", got, len(raw), name)
		}
	}
	// Hello lengths of every residue, each also split over two records.
	for i := 1; i <= 8; i++ {
		name := strings.Repeat("a", i) + ".example.com"
		a, b := net.Pipe()
		hello := make(chan []byte, 1)
		go func() {
			buf := make([]byte, 64<<10)
			n, _ := b.Read(buf)
			hello <- buf[:n]
			b.Close()
		}()
		_ = tls.Client(a, &tls.Config{ServerName: name, InsecureSkipVerify: true}).Handshake()
		a.Close()
		rec := <-hello
		for _, split := range []bool{false, true} {
			in := rec
			if split { // the handshake body in two records
				body := rec[5:]
				h := func(n int) []byte { return []byte{0x16, 3, 1, byte(n >> 8), byte(n)} }
				in = append(append(append(h(40), body[:40]...), h(len(body)-40)...), body[40:]...)
			}
			_, got, err := readClientHello(strings.NewReader(string(in)))
			if err != nil || got != name {
				t.Errorf("%s (split %v, %d bytes): %q, %v", name, split, len(in), got, err)
			}
		}
	}
	if _, _, err := readClientHello(strings.NewReader("GET / HTTP/1.1\r\n\r\n")); err == nil {
		t.Error("plain HTTP parsed as a ClientHello")
	}
}

func TestReadHTTPHost(t *testing.T) {
	for in, want := range map[string]string{
		"GET / HTTP/1.1\r\nHost: Example.com:8080\r\n\r\nbody": "example.com",
		"GET / HTTP/1.1\r\nHost: a.example.org\r\n\r\n":        "a.example.org",
		"GET / HTTP/1.0\r\n\r\n":                               "",
	} {
		raw, got, err := readHTTPHost(strings.NewReader(in))
		if err != nil || got != want || string(raw) != strings.TrimSuffix(in, "body") { // the head only
			t.Errorf("%q: %q, %v (raw %q), want %q", in, got, err, raw, want)
		}
	}
}

func TestHostResolvers(t *testing.T) {
	p := t.TempDir() + "/resolv.conf"
	writeFile(t, p, "# c\nnameserver 192.0.2.53\nnameserver fe80::1%eth0\nsearch example.com\nnameserver bad\n")
	got := hostResolvers(p)
	if strings.Join(got, ",") != "192.0.2.53:53,[fe80::1]:53" {
		t.Errorf("got %v", got)
	}
}

func writeFile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
