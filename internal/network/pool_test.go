package network

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"

	"github.com/agentbox/agentbox/errdefs"
)

func TestNewPool(t *testing.T) {
	cases := []struct {
		cidr string
		size int // 0: rejected
	}{
		{"10.200.0.0/16", 16384},
		{"10.200.0.0/29", 2},
		{"10.200.7.9/24", 64}, // host bits are masked
		{"10.200.0.0/30", 0},
		{"fd00::/64", 0},
		{"nonsense", 0},
	}
	for _, c := range cases {
		p, err := NewPool(c.cidr)
		if c.size == 0 {
			if !errors.Is(err, errdefs.ErrInvalidArgument) {
				t.Errorf("%s: err %v, want invalid", c.cidr, err)
			}
			continue
		}
		if err != nil || p.Size() != c.size {
			t.Errorf("%s: size %v, %v; want %d", c.cidr, p, err, c.size)
		}
	}
}

func TestPoolNeverCollides(t *testing.T) {
	p, _ := NewPool("10.200.0.0/26") // 16 subnets
	seen := map[netip.Addr]string{}
	for i := 0; i < 16; i++ {
		id := fmt.Sprint("sb", i)
		s, err := p.Allocate(id)
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range []netip.Addr{s.Prefix.Addr(), s.Gateway, s.Addr} {
			if other, dup := seen[a]; dup {
				t.Fatalf("%s of %s also belongs to %s", a, id, other)
			}
			seen[a] = id
		}
		if !s.Prefix.Contains(s.Gateway) || !s.Prefix.Contains(s.Addr) || s.Gateway == s.Addr {
			t.Fatalf("bad subnet %+v", s)
		}
		if again, _ := p.Allocate(id); again != s {
			t.Fatalf("second Allocate of %s = %+v, want %+v", id, again, s)
		}
	}
	if _, err := p.Allocate("one-too-many"); !errors.Is(err, errdefs.ErrResourceExhausted) {
		t.Fatalf("full pool: err %v", err)
	}
	freed, _ := p.Allocate("sb3")
	p.Release("sb3")
	p.Release("unknown")
	s, err := p.Allocate("new")
	if err != nil || s != freed {
		t.Fatalf("after release: %+v %v, want the freed %+v", s, err, freed)
	}
}

func TestPoolRestore(t *testing.T) {
	before, _ := NewPool("10.200.0.0/16")
	a, _ := before.Allocate("a")
	b, _ := before.Allocate("b")
	after, _ := NewPool("10.200.0.0/16") // a restarted daemon
	for id, s := range map[string]Subnet{"a": a, "b": b} {
		if err := after.Restore(id, s); err != nil {
			t.Fatal(err)
		}
	}
	c, _ := after.Allocate("c")
	if c == a || c == b {
		t.Fatalf("a new sandbox got a restored subnet: %+v", c)
	}
	if err := after.Restore("x", a); !errors.Is(err, errdefs.ErrAlreadyExists) {
		t.Fatalf("restoring a held subnet for another id: %v", err)
	}
	for _, bad := range []string{"10.201.0.0/30", "10.200.0.1/30", "10.200.0.0/29"} {
		if err := after.Restore("y", Subnet{Prefix: netip.MustParsePrefix(bad)}); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("restore %s: %v, want invalid", bad, err)
		}
	}
	if after.InUse() != 3 {
		t.Fatalf("in use %d, want 3", after.InUse())
	}
}
