package network

import (
	"os"
	"slices"
	"testing"

	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
)

func TestConnLimitRules(t *testing.T) {
	if got := connLimitRules(0); len(got) != 0 {
		t.Errorf("no limit: %d rules, want none", len(got))
	}
	f := firewall{connCap: 100}
	for _, tt := range []struct{ max, want int }{{0, 100}, {-1, 100}, {4, 4}, {100, 100}, {5000, 100}} {
		if got := f.connCount(Limits{MaxConnections: tt.max}); got != tt.want {
			t.Errorf("connCount(%d) with a ceiling of 100 = %d, want %d", tt.max, got, tt.want)
		}
	}
	got := connLimitRules(4)
	if len(got) != 1 {
		t.Fatalf("%d rules, want 1", len(got))
	}
	var cl *expr.Connlimit
	for _, e := range got[0] {
		if c, ok := e.(*expr.Connlimit); ok {
			cl = c
		}
	}
	if cl == nil || cl.Count != 4 || cl.Flags != nftConnlimitInvert {
		t.Errorf("connlimit %+v, want count 4 over (inverted)", cl)
	}
	if _, ok := got[0][len(got[0])-1].(*expr.Reject); !ok {
		t.Errorf("the rule does not end in reject: %T", got[0][len(got[0])-1])
	}
}

func TestBandwidth(t *testing.T) {
	for _, tt := range []struct {
		mbit  int
		rate  uint64
		burst uint32
	}{
		{1, 125_000, minBurst},
		{8, 1_000_000, minBurst},
		{100, 12_500_000, 1_250_000},
	} {
		rate, burst := bandwidth(tt.mbit)
		if rate != tt.rate || burst != tt.burst {
			t.Errorf("bandwidth(%d) = %d B/s, burst %d; want %d, %d", tt.mbit, rate, burst, tt.rate, tt.burst)
		}
	}
}

// TestShaping puts the shaping on a real veth pair, changes it and removes
// it (root: netlink on the host).
func TestShaping(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("needs root (netlink qdiscs); run the tests as root like make test does")
	}
	id := "limtest" + randSuffix()
	la := netlink.NewLinkAttrs()
	la.Name = HostVeth(id)
	veth := &netlink.Veth{LinkAttrs: la, PeerName: "lp" + id}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	defer netlink.LinkDel(veth)
	defer delIfb(id)
	if err := applyShaping(id, "limtest", Limits{BandwidthMbit: 8}); err != nil {
		t.Fatal(err)
	}
	got, err := Shaping(id)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"veth tbf rate=1000000", "veth ingress", "ifb tbf rate=1000000"}
	if !slices.Equal(got, want) {
		t.Errorf("qdiscs %v, want %v", got, want)
	}
	link, _ := netlink.LinkByName(HostVeth(id))
	filters, err := netlink.FilterList(link, netlink.MakeHandle(0xffff, 0))
	if err != nil || len(filters) != 1 || filters[0].Type() != "u32" {
		t.Errorf("ingress filters %v (%v), want one u32", filters, err)
	}
	if err := applyShaping(id, "limtest", Limits{BandwidthMbit: 16}); err != nil {
		t.Fatal(err)
	}
	if got, _ := Shaping(id); !slices.Contains(got, "veth tbf rate=2000000") || !slices.Contains(got, "ifb tbf rate=2000000") {
		t.Errorf("after a change: %v, want both tbf at 2000000 B/s", got)
	}
	if err := applyShaping(id, "limtest", Limits{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := Shaping(id); len(got) != 0 {
		t.Errorf("after removal: %v, want no qdisc", got)
	}
	if _, err := netlink.LinkByName(ifbName(id)); err == nil {
		t.Errorf("%s is left after removal", ifbName(id))
	}
	// Removing again is not an error.
	if err := applyShaping(id, "limtest", Limits{}); err != nil {
		t.Errorf("second removal: %v", err)
	}
}

func randSuffix() string {
	b := make([]byte, 2)
	f, _ := os.Open("/dev/urandom")
	f.Read(b)
	f.Close()
	const hex = "0123456789abcdef"
	return string([]byte{hex[b[0]>>4], hex[b[0]&15], hex[b[1]>>4], hex[b[1]&15]})
}
