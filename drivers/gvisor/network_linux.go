package gvisor

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"

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
// runsc reads the interfaces once, at create: an interface added later is
// never seen, hence Capabilities().NetNSAtCreate. It does so at `runsc
// start`, which therefore gets the same flag as create; other commands
// (state, kill, delete, pause) do not depend on it.

// createFlags are the runsc flags for `runsc create` of spec.
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

// startSandbox is `runsc start` of spec: this runsc configures the
// sandbox's network at start (the Sentry's SetNetworkArgs), so start needs
// create's network flag too; with --network=none it leaves only loopback.
func startSandbox(ctx context.Context, root string, spec *driver.Spec) ([]byte, error) {
	cmd := exec.CommandContext(ctx, runscPath(), append(createFlags(root, spec), "start", spec.ID)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("runsc start: %v: %s", err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}
