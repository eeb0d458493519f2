package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/agentbox/agentbox/driver"
	"github.com/agentbox/agentbox/internal/network"
)

// writeResolvConf points the sandbox's /etc/resolv.conf at its resolver,
// the daemon's DNS server on the gateway of sub (docs/network.md). It goes
// through the guest agent like any file write. The sandbox may rewrite
// the file; DNS to anywhere else is blocked whatever it says.
func writeResolvConf(ctx context.Context, drv driver.Driver, h *driver.Handle, sub network.Subnet) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return drv.DialGuest(ctx, h) },
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://guest/files?path=/etc/resolv.conf&mode=0644&user=root", strings.NewReader(resolvConf(sub)))
	if err != nil {
		return err
	}
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return fmt.Errorf("guest answered %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// resolvConf is the /etc/resolv.conf of a sandbox whose subnet is sub.
func resolvConf(sub network.Subnet) string {
	return fmt.Sprintf("# Written by agentbox: the sandbox's resolver, which answers only the\n# names its egress policy allows (DNS to anywhere else is blocked).\nnameserver %s\noptions edns0\n", sub.Gateway)
}
