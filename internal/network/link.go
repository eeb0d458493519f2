package network

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// VethPrefix starts the host-side name of every sandbox veth: "abx" and
// the last 12 characters of the sandbox id (LinkID) fill IFNAMSIZ
// exactly.
const VethPrefix = "abx"

// LinkID is the part of sandbox id that names its interfaces: its last 12
// characters. An id of a daemon with node_id is 15 characters (the node's
// 3, then 12 random: api.NodeOfID), one interface name holds only 15, and
// every id on one daemon has the same node_id, so the random 12 are as
// unique there as the whole id.
func LinkID(id string) string {
	if len(id) > linkIDLen {
		return id[len(id)-linkIDLen:]
	}
	return id
}

const linkIDLen = 12 // api.IDRandLen; 15 (IFNAMSIZ-1) less the prefixes

// linkIDs is the LinkID of every id ids holds true, for the leftover
// sweeps.
func linkIDs(ids map[string]bool) map[string]bool {
	out := make(map[string]bool, len(ids))
	for id, ok := range ids {
		if ok {
			out[LinkID(id)] = true
		}
	}
	return out
}

// guestIf is the sandbox side's name inside its namespace.
const guestIf = "eth0"

// HostVeth is the host-side interface name of sandbox id's veth.
func HostVeth(id string) string { return VethPrefix + LinkID(id) }

// addLink creates the veth pair of sandbox id with its peer in the network
// namespace of pid, addresses both ends from sub, brings them up and sets
// the sandbox's default route through the host end. Any earlier host end
// of the same name (a previous init's) is removed first. One netlink
// socket on each side carries every request.
func addLink(id string, pid int, sub Subnet, alias string) (err error) {
	hh, err := netlink.NewHandle(unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink: %w", err)
	}
	defer hh.Close()
	name := HostVeth(id)
	if l, err := hh.LinkByName(name); err == nil {
		_ = hh.LinkDel(l)
	}
	ns, err := netns.GetFromPath(fmt.Sprintf("/proc/%d/ns/net", pid))
	if err != nil {
		return fmt.Errorf("opening the network namespace of pid %d: %w", pid, err)
	}
	defer ns.Close()
	la := netlink.NewLinkAttrs()
	la.Name = name
	la.Alias = alias
	la.Flags = net.FlagUp // up from the start: the rules exist already (Attach)
	veth := &netlink.Veth{LinkAttrs: la, PeerName: guestIf, PeerNamespace: netlink.NsFd(int(ns))}
	if err := hh.LinkAdd(veth); err != nil { // it fills in veth.Index
		return fmt.Errorf("creating veth %s: %w", name, err)
	}
	defer func() {
		if err != nil {
			_ = hh.LinkDel(veth)
		}
	}()
	if err := hh.AddrAdd(veth, &netlink.Addr{IPNet: ipNet(sub.Gateway.AsSlice(), sub.Prefix.Bits())}); err != nil {
		return fmt.Errorf("addressing %s: %w", name, err)
	}
	// The kernel takes the up flag with the create, not the alias.
	if err := hh.LinkSetAlias(veth, alias); err != nil {
		return fmt.Errorf("tagging %s: %w", name, err)
	}
	h, err := netlink.NewHandleAt(ns, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("netlink in the sandbox's namespace: %w", err)
	}
	defer h.Close()
	peer, err := h.LinkByName(guestIf)
	if err != nil {
		return fmt.Errorf("finding %s in the sandbox: %w", guestIf, err)
	}
	if err := h.AddrAdd(peer, &netlink.Addr{IPNet: ipNet(sub.Addr.AsSlice(), sub.Prefix.Bits())}); err != nil {
		return fmt.Errorf("addressing the sandbox's %s: %w", guestIf, err)
	}
	if err := h.LinkSetUp(peer); err != nil {
		return fmt.Errorf("bringing the sandbox's %s up: %w", guestIf, err)
	}
	if err := h.RouteAdd(&netlink.Route{LinkIndex: peer.Attrs().Index, Gw: net.IP(sub.Gateway.AsSlice())}); err != nil {
		return fmt.Errorf("setting the sandbox's default route: %w", err)
	}
	return nil
}

// delLink removes sandbox id's host-side veth (its peer goes with it);
// a missing one is not an error.
func delLink(id string) error {
	l, err := netlink.LinkByName(HostVeth(id))
	if err != nil {
		var nf netlink.LinkNotFoundError
		if errors.As(err, &nf) || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("finding veth %s: %w", HostVeth(id), err)
	}
	if err := netlink.LinkDel(l); err != nil && !errors.Is(err, syscall.ENODEV) {
		// ENODEV: the kernel removed it meanwhile, with the sandbox's
		// namespace (its init just died).
		return fmt.Errorf("removing veth %s: %w", HostVeth(id), err)
	}
	return nil
}

func ipNet(ip net.IP, bits int) *net.IPNet {
	return &net.IPNet{IP: ip, Mask: net.CIDRMask(bits, len(ip)*8)}
}
