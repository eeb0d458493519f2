package network

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/agentbox/agentbox/api"
)

// TestAttachWithLimits: Attach makes the policy chain and the connection
// limit together, the limit's jump ahead of the policy's; the host end is
// up and tagged, the sandbox end addressed, up and routed; a second
// Attach (a new init) replaces the limit without doubling any jump; Detach
// and ReleaseLimits leave no chain and no veth.
func TestAttachWithLimits(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: creates a network namespace, a veth and an nftables table")
	}
	sfx := make([]byte, 3)
	_, _ = rand.Read(sfx)
	name := "abx-ut-" + hex.EncodeToString(sfx)
	m, err := NewManager(name, fmt.Sprintf("10.203.%d.0/24", sfx[0]), slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Start(nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	t.Cleanup(func() { _ = exec.Command("nft", "delete", "table", "inet", name).Run() })
	id := hex.EncodeToString(sfx) + "fedcba"
	pol, err := ParsePolicy(api.EgressInternet, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	attach := func(maxConns int) Subnet {
		t.Helper()
		sbx := exec.Command("unshare", "-n", "sleep", "120")
		if err := sbx.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = sbx.Process.Kill(); _ = sbx.Wait() })
		time.Sleep(100 * time.Millisecond) // unshare has exec'd sleep
		sub, err := m.Attach(id, sbx.Process.Pid, pol, Subnet{}, Limits{MaxConnections: maxConns})
		if err != nil {
			t.Fatal(err)
		}
		fwd := nftList("chain", "inet", name, "forward")
		if got := strings.Count(fwd, "jump "+limitChain(id)); got != 1 {
			t.Errorf("forward chain has %d jumps to %s, want 1:\n%s", got, limitChain(id), fwd)
		}
		if got := strings.Count(fwd, "jump "+sandboxChain(id)); got != 1 {
			t.Errorf("forward chain has %d jumps to %s, want 1:\n%s", got, sandboxChain(id), fwd)
		}
		if strings.Index(fwd, "jump "+limitChain(id)) > strings.Index(fwd, "jump "+sandboxChain(id)) {
			t.Errorf("the limit's jump comes after the policy's:\n%s", fwd)
		}
		lim := nftList("chain", "inet", name, limitChain(id))
		if !strings.Contains(lim, fmt.Sprintf("ct count over %d", maxConns)) || strings.Count(lim, "ct count") != 1 {
			t.Errorf("chain %s does not hold the one limit %d:\n%s", limitChain(id), maxConns, lim)
		}
		host, err := netlink.LinkByName(HostVeth(id))
		if err != nil {
			t.Fatal(err)
		}
		if a := host.Attrs(); a.Flags&net.FlagUp == 0 || a.Alias != name {
			t.Errorf("host veth: flags %v, alias %q; want up, %q", a.Flags, a.Alias, name)
		}
		inNetns(t, sbx.Process.Pid, func() {
			eth, err := netlink.LinkByName(guestIf)
			if err != nil {
				t.Error(err)
				return
			}
			addrs, _ := netlink.AddrList(eth, netlink.FAMILY_V4)
			routes, _ := netlink.RouteList(eth, netlink.FAMILY_V4)
			var gw []string
			for _, r := range routes {
				if r.Gw != nil {
					gw = append(gw, r.Gw.String())
				}
			}
			if eth.Attrs().Flags&net.FlagUp == 0 || len(addrs) != 1 || addrs[0].IP.String() != sub.Addr.String() ||
				len(gw) != 1 || gw[0] != sub.Gateway.String() {
				t.Errorf("sandbox's %s: flags %v, addresses %v, gateways %v; want up, %s, via %s", guestIf, eth.Attrs().Flags, addrs, gw, sub.Addr, sub.Gateway)
			}
		})
		return sub
	}
	first := attach(7)
	if again := attach(9); again != first {
		t.Errorf("the second attach moved the sandbox from %v to %v", first, again)
	}

	if err := m.Detach(id); err != nil {
		t.Fatal(err)
	}
	if err := m.ReleaseLimits(id); err != nil {
		t.Fatal(err)
	}
	if table := nftList("table", "inet", name); strings.Contains(table, id) {
		t.Errorf("the table still names the sandbox after detach:\n%s", table)
	}
	if _, err := netlink.LinkByName(HostVeth(id)); err == nil {
		t.Errorf("veth %s left after detach", HostVeth(id))
	}
}
