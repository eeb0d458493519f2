package sandbox

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/guestclient"
	"github.com/agentbox/agentbox/internal/network"
)

// writeResolvConf points the sandbox's /etc/resolv.conf at its resolver,
// the daemon's DNS server on the gateway of sub (docs/network.md). It goes
// through the guest agent like any file write. The sandbox may rewrite
// the file; DNS to anywhere else is blocked whatever it says.
func writeResolvConf(ctx context.Context, drv driver.Driver, h *driver.Handle, sub network.Subnet) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c := guestclient.Dial(func(ctx context.Context) (net.Conn, error) { return drv.DialGuest(ctx, h) })
	return c.WriteFile(ctx, "/etc/resolv.conf", strings.NewReader(resolvConf(sub)), guestclient.WriteOptions{Mode: "0644", User: "root"})
}

// resolvConf is the /etc/resolv.conf of a sandbox whose subnet is sub.
func resolvConf(sub network.Subnet) string {
	return fmt.Sprintf("# Written by agentbox: the sandbox's resolver, which answers only the\n# names its egress policy allows (DNS to anywhere else is blocked).\nnameserver %s\noptions edns0\n", sub.Gateway)
}
