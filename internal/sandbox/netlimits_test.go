package sandbox

import (
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/config"
)

func TestResolveLimits(t *testing.T) {
	cfg := config.Default()
	cfg.Network.MaxConnections, cfg.Network.BandwidthMbit = 100, 0
	for _, tt := range []struct {
		name              string
		in                api.Network
		wantConns, wantBW int
		wantErr           string
	}{
		{"defaults", api.Network{Egress: api.EgressInternet}, 100, -1, ""},
		{"explicit", api.Network{Egress: api.EgressCustom, MaxConnections: 4, BandwidthMbit: 8}, 4, 8, ""},
		{"none asked", api.Network{Egress: api.EgressInternet, MaxConnections: -1, BandwidthMbit: -1}, -1, -1, ""},
		{"egress none", api.Network{Egress: api.EgressNone}, 0, 0, ""},
		{"limits with egress none", api.Network{Egress: api.EgressNone, MaxConnections: 4}, 0, 0, "need egress"},
		{"too many", api.Network{Egress: api.EgressInternet, MaxConnections: config.MaxConnectionsLimit + 1}, 0, 0, "max_connections must be between 1 and"},
		{"negative", api.Network{Egress: api.EgressInternet, BandwidthMbit: -2}, 0, 0, "bandwidth_mbit must be between 1 and"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n := tt.in
			err := resolveLimits(&cfg, &n)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if n.MaxConnections != tt.wantConns || n.BandwidthMbit != tt.wantBW {
				t.Errorf("got %d conns, %d Mbit; want %d, %d", n.MaxConnections, n.BandwidthMbit, tt.wantConns, tt.wantBW)
			}
		})
	}
}

func TestNextLimits(t *testing.T) {
	inet := func(c, b int) *api.Network {
		return &api.Network{Egress: api.EgressInternet, MaxConnections: c, BandwidthMbit: b}
	}
	def := inet(1024, -1)
	for _, tt := range []struct {
		name      string
		next, old *api.Network
		req       api.Network
		want      [2]int
	}{
		{"kept", inet(0, 0), inet(4, 8), api.Network{}, [2]int{4, 8}},
		{"changed", inet(0, 0), inet(4, 8), api.Network{MaxConnections: 10, BandwidthMbit: -1}, [2]int{10, -1}},
		{"from none: defaults", inet(0, 0), &api.Network{Egress: api.EgressNone}, api.Network{BandwidthMbit: 2}, [2]int{1024, 2}},
		{"to none: cleared", &api.Network{Egress: api.EgressNone}, inet(4, 8), api.Network{}, [2]int{0, 0}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			nextLimits(tt.next, tt.old, &tt.req, def)
			if got := [2]int{tt.next.MaxConnections, tt.next.BandwidthMbit}; got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
