package bench

import (
	"context"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/agentbox/agentbox/client"
)

// FreshConnClient returns a client that opens a new connection for every
// request (no keep-alive), as the CLI does by running once per command.
// host is what --host says ("" for AGENTBOX_HOST, else the local daemon).
// The stream lines use it next to the shared keep-alive client, because
// the two behave differently (docs/PERFORMANCE.md).
func FreshConnClient(host string) (*client.Client, error) {
	if host == "" {
		host = os.Getenv(client.EnvHost)
	}
	if host == "" {
		if fi, err := os.Stat(client.DefaultSocketPath); err == nil && fi.Mode()&os.ModeSocket != 0 {
			host = "unix://" + client.DefaultSocketPath
		} else {
			host = client.DefaultHTTPHost
		}
	}
	tr := &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}
	if sock, ok := strings.CutPrefix(host, "unix://"); ok {
		tr.Proxy = nil
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", sock)
		}
	}
	return client.New(client.WithHost(host), client.WithHTTPClient(&http.Client{Transport: tr}))
}
