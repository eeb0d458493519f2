package microvm

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/agentbox/agentbox/internal/guest/proto"
)

// Networking. A sandbox with egress gets a network namespace the service
// prepared before Create (driver.Spec.NetNS: the veth's sandbox end eth0
// with its address and default route, the host end under the daemon's
// nftables chain, shaping and connection limit), as on the gvisor tier.
// The VM joins it through a tap: in the namespace the driver adds tap0,
// hands eth0's address to the VM (removing it from eth0) and redirects
// every packet between eth0 and tap0 with tc (an ingress qdisc on each,
// a u32 filter matching all with a mirred redirect to the other; the
// host's shaping does the same, matchall is not in every kernel), so the VM's
// NIC, given eth0's MAC, is the sandbox's end of the veth as far as the
// host can tell. Every packet the sandbox sends therefore crosses the
// host-side veth, where the firewall and the limits hold whatever the
// guest kernel does. QEMU stays in an empty namespace of its own: the
// driver opens the tap there and passes QEMU the descriptor.

// tapDev is the tap's name inside the sandbox's namespace.
const tapDev = "tap0"

// vmNet is what a VM's network needs: the tap's descriptor for QEMU,
// eth0's MAC for its NIC, and the address the guest takes.
type vmNet struct {
	tap *os.File
	mac string
	cfg proto.VMNet
}

// setupNet prepares the namespace at nsPath for a VM (see above). On
// error the namespace may hold a half-made tap; the service removes the
// namespace with the sandbox.
func setupNet(nsPath string) (*vmNet, error) {
	in := func(args ...string) ([]byte, error) {
		out, err := exec.Command("nsenter", append([]string{"--net=" + nsPath}, args...)...).CombinedOutput()
		if err != nil {
			return out, fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
		}
		return out, nil
	}
	out, err := in("ip", "-j", "addr", "show", "dev", "eth0")
	if err != nil {
		return nil, err
	}
	var links []struct {
		MTU      int    `json:"mtu"`
		Address  string `json:"address"`
		AddrInfo []struct {
			Family    string `json:"family"`
			Local     string `json:"local"`
			Prefixlen int    `json:"prefixlen"`
		} `json:"addr_info"`
	}
	if err := json.Unmarshal(out, &links); err != nil || len(links) != 1 {
		return nil, fmt.Errorf("reading eth0 of %s: %q (%v)", nsPath, out, err)
	}
	n := &vmNet{mac: links[0].Address, cfg: proto.VMNet{MTU: links[0].MTU, MAC: links[0].Address}}
	for _, a := range links[0].AddrInfo {
		if a.Family == "inet" {
			n.cfg.Address = fmt.Sprintf("%s/%d", a.Local, a.Prefixlen)
		}
	}
	if out, err = in("ip", "-j", "route", "show", "default"); err != nil {
		return nil, err
	}
	var routes []struct {
		Gateway string `json:"gateway"`
	}
	if err := json.Unmarshal(out, &routes); err != nil || len(routes) == 0 || routes[0].Gateway == "" {
		return nil, fmt.Errorf("reading the default route of %s: %q (%v)", nsPath, out, err)
	}
	n.cfg.Gateway = routes[0].Gateway
	if n.cfg.Address == "" || n.mac == "" {
		return nil, fmt.Errorf("eth0 of %s has no IPv4 address or MAC: %q", nsPath, out)
	}
	for _, c := range [][]string{
		{"ip", "tuntap", "add", "dev", tapDev, "mode", "tap"},
		{"ip", "link", "set", tapDev, "mtu", fmt.Sprint(n.cfg.MTU), "up"},
		{"ip", "addr", "flush", "dev", "eth0"},
		{"tc", "qdisc", "add", "dev", "eth0", "ingress"},
		{"tc", "filter", "add", "dev", "eth0", "parent", "ffff:", "protocol", "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", tapDev},
		{"tc", "qdisc", "add", "dev", tapDev, "ingress"},
		{"tc", "filter", "add", "dev", tapDev, "parent", "ffff:", "protocol", "all", "u32", "match", "u32", "0", "0", "action", "mirred", "egress", "redirect", "dev", "eth0"},
	} {
		if _, err := in(c...); err != nil {
			return nil, fmt.Errorf("the VM's network in %s: %w", nsPath, err)
		}
	}
	if n.tap, err = openTap(nsPath); err != nil {
		return nil, err
	}
	return n, nil
}

// openTap opens tap0 of the namespace at nsPath (TUNSETIFF works on the
// calling thread's namespace): on a thread of its own that joins the
// namespace and then ends with its goroutine.
func openTap(nsPath string) (*os.File, error) {
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends in the sandbox's namespace
		f, err := func() (*os.File, error) {
			ns, err := unix.Open(nsPath, unix.O_RDONLY|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			defer unix.Close(ns)
			if err := unix.Setns(ns, unix.CLONE_NEWNET); err != nil {
				return nil, fmt.Errorf("joining %s: %w", nsPath, err)
			}
			fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return nil, err
			}
			ifr, err := unix.NewIfreq(tapDev)
			if err == nil {
				ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
				err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr)
			}
			if err != nil {
				unix.Close(fd)
				return nil, fmt.Errorf("attaching to %s: %w", tapDev, err)
			}
			return os.NewFile(uintptr(fd), tapDev), nil
		}()
		ch <- result{f, err}
	}()
	r := <-ch
	if r.err != nil {
		return nil, fmt.Errorf("the VM's tap in %s: %w", nsPath, r.err)
	}
	return r.f, nil
}
