package sandbox

import (
	"errors"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
	"github.com/agentbox/agentbox/internal/config"
)

func TestResolveNetwork(t *testing.T) {
	cfg := config.Default()
	cases := []struct {
		name    string
		in      *api.Network
		class   error // nil: accepted
		preview string
	}{
		{"nil is the defaults", nil, nil, api.PreviewTokenMode},
		{"internet", &api.Network{Egress: api.EgressInternet, Deny: []string{"1.2.3.0/24:443"}}, nil, api.PreviewTokenMode},
		{"custom", &api.Network{Egress: api.EgressCustom, Allow: []string{"198.18.0.0/15", ":53", "[fd00::/8]:80"}, Deny: []string{"198.18.0.9"}}, nil, api.PreviewTokenMode},
		{"none, public", &api.Network{Egress: api.EgressNone, Preview: api.PreviewPublic}, nil, api.PreviewPublic},
		{"unknown egress", &api.Network{Egress: "all"}, errdefs.ErrInvalidArgument, ""},
		{"unknown preview", &api.Network{Preview: "open"}, errdefs.ErrInvalidArgument, ""},
		{"token chosen by the caller", &api.Network{PreviewToken: "x"}, errdefs.ErrInvalidArgument, ""},
		{"domain chosen by the caller", &api.Network{PreviewDomain: "x"}, errdefs.ErrInvalidArgument, ""},
		{"rules with none", &api.Network{Deny: []string{"10.0.0.0/8"}}, errdefs.ErrInvalidArgument, ""},
		{"address chosen by the caller", &api.Network{Address: "10.200.0.2/30"}, errdefs.ErrInvalidArgument, ""},
		{"domain allow", &api.Network{Egress: api.EgressCustom, Allow: []string{"example.org", "*.example.net"}}, nil, api.PreviewTokenMode},
		{"wildcard domain deny", &api.Network{Egress: api.EgressInternet, Deny: []string{"*.example.com"}}, nil, api.PreviewTokenMode},
		{"domain with a port", &api.Network{Egress: api.EgressCustom, Allow: []string{"example.org:443"}}, errdefs.ErrInvalidArgument, ""},
		{"bad cidr", &api.Network{Egress: api.EgressCustom, Allow: []string{"10.0.0.0/33"}}, errdefs.ErrInvalidArgument, ""},
		{"bad port", &api.Network{Egress: api.EgressCustom, Allow: []string{":70000"}}, errdefs.ErrInvalidArgument, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			n, err := resolveNetwork(&cfg, c.in)
			if c.class != nil {
				if !errors.Is(err, c.class) {
					t.Fatalf("err = %v, want class %v", err, c.class)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.Egress != wantEgress(c.in) || n.Preview != c.preview || len(n.PreviewToken) != 32 || n.PreviewDomain != "localhost:7423" {
				t.Fatalf("resolved = %+v", n)
			}
		})
	}
	a, _ := resolveNetwork(&cfg, nil)
	b := forkNetwork(a)
	if a.PreviewToken == b.PreviewToken || b.Preview != a.Preview {
		t.Fatalf("fork network = %+v of %+v: want the same settings and a new token", b, a)
	}
}

func wantEgress(n *api.Network) string {
	if n == nil || n.Egress == "" {
		return api.EgressNone
	}
	return n.Egress
}
