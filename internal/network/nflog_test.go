package network

import (
	"net/netip"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"

	"github.com/agentbox/agentbox/api"
)

// TestLogRulesRateLimited: every log statement of a sandbox chain sits in
// a rule of its own, behind the sandbox's one named limit, and is
// followed by the rule with the same match and the verdict, so that a
// flow over the log rate is decided as always.
func TestLogRulesRateLimited(t *testing.T) {
	f := &firewall{table: &nftables.Table{Name: "t"}, nflog: 1234}
	lg := func(allow bool, reason string) []expr.Any { return f.logExpr("sb1", allow, reason) }
	pol := Policy{Egress: api.EgressCustom, Allow: []Rule{{Prefix: netip.MustParsePrefix("192.0.2.0/24")}}}
	rules := policyRules(pol, netip.MustParsePrefix("10.200.0.0/16"), "set", lg)
	logs := 0
	for i, r := range rules {
		var ref *expr.Objref
		var hasLog, hasVerdict bool
		for _, e := range r {
			switch e := e.(type) {
			case *expr.Objref:
				ref = e
			case *expr.Log:
				hasLog = true
			case *expr.Verdict, *expr.Reject:
				hasVerdict = true
			}
		}
		if !hasLog {
			continue
		}
		logs++
		if ref == nil || ref.Name != logLimitName("sb1") || ref.Type != int(nftables.ObjTypeLimit) {
			t.Errorf("rule %d logs without the sandbox's limit object: %+v", i, ref)
		}
		if hasVerdict {
			t.Errorf("rule %d logs and decides: over the log rate it would not decide", i)
		}
		if i+1 >= len(rules) || len(rules[i+1]) != len(r)-2+1 {
			t.Errorf("rule %d is not followed by its verdict rule (the same match and a verdict)", i)
		}
	}
	if logs == 0 {
		t.Fatal("no rule logs")
	}
}
