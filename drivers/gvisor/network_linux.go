package gvisor

import (
	"github.com/agentbox/agentbox/driver"
)

// Networking. A sandbox without egress runs with --network=none: gVisor's
// netstack has only loopback. A sandbox with egress (internet, custom)
// gets a network namespace the service prepared before Create
// (driver.Spec.NetNS: the veth's sandbox end eth0 with its address and
// default route, the host end under the daemon's nftables chain). The OCI
// spec names that namespace, and runsc runs with --network=sandbox: the
// Sentry starts inside it, takes over eth0's addresses and routes into
// its own netstack (runsc removes them from the host interface) and sends
// the sandbox's packets through eth0 with a packet socket. Every packet
// the sandbox sends therefore crosses the host-side veth, where the
// firewall, the connection limit and the shaping hold whatever gVisor's
// netstack does.
//
// runsc reads the interfaces once, when the sandbox starts (the Sentry's
// SetNetworkArgs, part of `runsc run`): an interface added later is never
// seen, hence driver.NetNSAtCreate. Other commands (state, kill,
// delete, pause) do not depend on the flag.

// createFlags are the runsc flags for `runsc run` (or restore) of spec.
func createFlags(root string, spec *driver.Spec) []string {
	flags := globalFlags(root)
	if spec.NetNS == "" {
		return flags
	}
	for i, f := range flags {
		if f == "--network=none" {
			flags[i] = "--network=sandbox"
		}
	}
	return flags
}
