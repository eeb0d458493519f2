// Package client is the Go SDK of agentbox: a thin, typed client of the
// daemon's HTTP API (api/openapi.yaml). Errors from the API come back as
// *errdefs.Error values whose class matches the API's code, so
//
//	if errors.Is(err, errdefs.ErrNotFound) { ... }
//
// works. A Client is safe for concurrent use.
//
//	c, err := client.New() // AGENTBOX_HOST, AGENTBOX_API_KEY, or local defaults
//	sb, err := c.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "base"})
//	res, err := c.Exec(ctx, sb.ID, api.ExecRequest{Cmd: []string{"uname", "-a"}})
//	err = c.DestroySandbox(ctx, sb.ID)
package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/agentbox/agentbox/errdefs"
)

// Defaults used when neither an option nor the environment names a host.
const (
	DefaultSocketPath   = "/run/agentbox/agentbox.sock"
	DefaultHTTPHost     = "http://127.0.0.1:7423"
	DefaultAdminKeyPath = "/var/lib/agentbox/admin.key"

	// EnvHost and EnvAPIKey name the environment variables New reads.
	EnvHost   = "AGENTBOX_HOST"
	EnvAPIKey = "AGENTBOX_API_KEY"
)

// Client talks to one agentbox daemon.
type Client struct {
	base   string // "http://host:port" (or "http://agentbox" over a unix socket)
	host   string // the host as the user named it, for error messages
	apiKey string
	hc     *http.Client
	ua     string
	// ndjson: exec streams ask for NDJSON only (NDJSONStreams).
	ndjson bool
}

// NDJSONStreams returns a copy of c whose exec streams ask for NDJSON
// lines only, as the Python and TypeScript SDKs read them, rather than
// binary frames (api.FramesContentType): for comparing the two.
func (c *Client) NDJSONStreams() *Client {
	d := *c
	d.ndjson = true
	return &d
}

type config struct {
	host         string
	apiKey       string
	hc           *http.Client
	socketPath   string
	adminKeyPath string
	userAgent    string
	noEnv        bool
	tls          tlsOptions // tls.go
}

// Option configures New.
type Option func(*config)

// WithHost sets the daemon's address: "unix:///run/agentbox/agentbox.sock",
// "http://127.0.0.1:7423", "https://...", or a bare "host:port". It wins
// over AGENTBOX_HOST.
func WithHost(host string) Option { return func(c *config) { c.host = host } }

// WithAPIKey sets the API key sent as a bearer token. It wins over
// AGENTBOX_API_KEY.
func WithAPIKey(key string) Option { return func(c *config) { c.apiKey = key } }

// WithHTTPClient replaces the HTTP client entirely; the caller is then
// responsible for dialing (unix sockets included). Its Timeout must be zero
// for streams to work.
func WithHTTPClient(hc *http.Client) Option { return func(c *config) { c.hc = hc } }

// WithSocketPath changes the unix socket tried when no host is set and the
// process runs as root (default DefaultSocketPath).
func WithSocketPath(path string) Option { return func(c *config) { c.socketPath = path } }

// WithAdminKeyPath changes the key file read when no key is set and the
// process runs as root (default DefaultAdminKeyPath).
func WithAdminKeyPath(path string) Option { return func(c *config) { c.adminKeyPath = path } }

// WithUserAgent sets the User-Agent header.
func WithUserAgent(ua string) Option { return func(c *config) { c.userAgent = ua } }

// WithoutEnvironment makes New ignore AGENTBOX_HOST and AGENTBOX_API_KEY.
func WithoutEnvironment() Option { return func(c *config) { c.noEnv = true } }

// errEmptyKeyEnv is New's answer to AGENTBOX_API_KEY set to nothing.
var errEmptyKeyEnv = errdefs.Invalid("%s is set but empty (did the command that made the key fail?); set it to an API key, or unset it to use the admin key as root on the daemon's host", EnvAPIKey)

// New returns a client. The host comes from WithHost, else AGENTBOX_HOST;
// the key from WithAPIKey, else AGENTBOX_API_KEY. When no host is set and
// the process runs as root, New uses the local unix socket if it exists
// (else DefaultHTTPHost); when no key is set and the process runs as root,
// it reads the admin key file if there is one, for a daemon on this
// machine only (a unix socket or a loopback address). AGENTBOX_API_KEY set
// but empty is an error: it never falls back to the admin key.
func New(opts ...Option) (*Client, error) {
	cfg := config{
		socketPath:   DefaultSocketPath,
		adminKeyPath: DefaultAdminKeyPath,
		userAgent:    "agentbox-go",
	}
	for _, o := range opts {
		o(&cfg)
	}
	if !cfg.noEnv {
		if cfg.host == "" {
			cfg.host = os.Getenv(EnvHost)
		}
		if cfg.apiKey == "" {
			if v, set := os.LookupEnv(EnvAPIKey); set {
				// Set but empty is a mistake (a script whose `key create`
				// failed), never a reason to fall back to the admin key.
				if strings.TrimSpace(v) == "" {
					return nil, errEmptyKeyEnv
				}
				cfg.apiKey = v
			}
		}
	}
	root := os.Geteuid() == 0
	if cfg.host == "" {
		cfg.host = DefaultHTTPHost
		if root {
			if fi, err := os.Stat(cfg.socketPath); err == nil && fi.Mode()&os.ModeSocket != 0 {
				cfg.host = "unix://" + cfg.socketPath
			}
		}
	}
	base, socket, err := parseHost(cfg.host)
	if err != nil {
		return nil, err
	}
	// The admin key never leaves this machine: it is read only for a
	// daemon on a unix socket or a loopback address.
	if cfg.apiKey == "" && root && cfg.adminKeyPath != "" && (socket != "" || isLoopback(base)) {
		b, err := os.ReadFile(cfg.adminKeyPath)
		switch {
		case err == nil:
			cfg.apiKey = strings.TrimSpace(string(b))
		case !os.IsNotExist(err):
			return nil, fmt.Errorf("reading admin key: %w", err)
		}
	}
	hc := cfg.hc
	if hc == nil {
		t := newTransport(socket)
		if err := cfg.tls.apply(t, cfg.noEnv); err != nil {
			return nil, err
		}
		hc = &http.Client{Transport: t}
	}
	return &Client{base: base, host: cfg.host, apiKey: cfg.apiKey, hc: hc, ua: cfg.userAgent}, nil
}

// Host returns the daemon address the client talks to, as configured.
func (c *Client) Host() string { return c.host }

// isLoopback reports whether base ("http://host:port") names this machine.
func isLoopback(base string) bool {
	u, err := url.Parse(base)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// parseHost turns a host setting into a base URL and, for unix sockets, the
// socket's path.
func parseHost(host string) (base, socket string, err error) {
	host = strings.TrimSpace(host)
	switch {
	case strings.HasPrefix(host, "unix://"):
		socket = strings.TrimPrefix(host, "unix://")
		if socket == "" || !strings.HasPrefix(socket, "/") {
			return "", "", fmt.Errorf("%s: a unix socket host wants an absolute path, like unix:///run/agentbox/agentbox.sock, got %q", EnvHost, host)
		}
		return "http://agentbox", socket, nil
	case strings.HasPrefix(host, "http://"), strings.HasPrefix(host, "https://"):
	case strings.HasPrefix(host, "tcp://"):
		host = "http://" + strings.TrimPrefix(host, "tcp://")
	case strings.Contains(host, "://"):
		return "", "", fmt.Errorf("%s: unsupported scheme in %q; use unix://, http://, https:// or host:port", EnvHost, host)
	default:
		host = "http://" + host
	}
	u, err := url.Parse(host)
	if err != nil || u.Host == "" {
		return "", "", fmt.Errorf("%s: cannot parse %q as an address; use unix:///path, http://host:port or host:port", EnvHost, host)
	}
	return strings.TrimRight(u.Scheme+"://"+u.Host+u.Path, "/"), "", nil
}

// newTransport returns a keep-alive HTTP/1.1 transport (full-duplex exec
// streams need HTTP/1.1 here), dialing socket when it is set. It sets no
// overall timeouts: exec streams and archives may run for hours.
func newTransport(socket string) *http.Transport {
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           d.DialContext,
		MaxIdleConns:          64,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
	}
	if socket != "" {
		t.Proxy = nil
		t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}
	}
	return t
}
