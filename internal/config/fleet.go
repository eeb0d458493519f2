package config

import (
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// The roles of `agentbox serve` (role).
const (
	// RoleNode is today's daemon: sandboxes, storage, drivers.
	RoleNode = "node"
	// RoleGateway is a fleet gateway (internal/gateway, docs/cluster.md):
	// tenant auth, placement and a reverse proxy in front of nodes, and
	// no sandbox of its own.
	RoleGateway = "gateway"
)

// MinFleetKeyLen is the shortest secret a fleet key file may hold.
const MinFleetKeyLen = 32

// Fleet ([fleet]) joins daemons into one API (docs/cluster.md). On a node
// it names the gateway's key; on a gateway the key it sends and the
// nodes it fronts.
type Fleet struct {
	// GatewayKeyFile (gateway_key_file), on a node: a file holding the
	// secret (at least 32 characters) the gateway sends as its bearer
	// key. A request carrying it acts for the principal the gateway
	// names in Agentbox-Tenant and Agentbox-Admin. "" (the default): no
	// gateway.
	GatewayKeyFile string `toml:"gateway_key_file"`
	// KeyFile (key_file), on a gateway: the file holding that secret, the
	// file the nodes name as gateway_key_file.
	KeyFile string `toml:"key_file"`
	// PollInterval (poll_interval), on a gateway: how often it reads each
	// node's GET /v1/node. Default "1s".
	PollInterval time.Duration `toml:"poll_interval"`
	// Candidates (candidates), on a gateway: how many available nodes a
	// create samples and scores (best of K). Default 3.
	Candidates int `toml:"candidates"`
	// Registry (registry), on a gateway: the fleet's OCI registry as
	// HOST:PORT/PREFIX (e.g. "192.0.2.1:5000/agentbox"). With it the
	// gateway moves templates and snapshots between nodes: a template
	// pulled onto a node on first use, forks spread over nodes, a create
	// from a snapshot of a node that is down (docs/cluster.md). Every
	// node must reach it, and list its host in [registry] insecure when
	// it speaks plain HTTP. "" (the default): none, each node keeps what
	// it has.
	Registry string `toml:"registry"`
	// Nodes ([[fleet.node]]), on a gateway: the static membership.
	Nodes []FleetNode `toml:"node"`
}

// FleetNode ([[fleet.node]]) is one node a gateway fronts.
type FleetNode struct {
	// ID (id) is the node's node_id: the first three characters of every
	// id it hands out.
	ID string `toml:"id"`
	// URL (url) is the node's API, "http://192.0.2.11:7423" or https.
	URL string `toml:"url"`
	// Fingerprint (fingerprint), for an https url: trust exactly the
	// node's certificate with this SHA-256 (hex, as the node's `agentbox
	// serve` logs it; its self-signed one), whoever signed it.
	Fingerprint string `toml:"fingerprint"`
	// CAFile (ca_file), for an https url: a PEM file of the authorities
	// that sign the node's certificate, instead of the system's.
	CAFile string `toml:"ca_file"`
}

// IsGateway reports whether the daemon runs in the gateway role.
func (c Config) IsGateway() bool { return c.Role == RoleGateway }

// ReadFleetKey reads a fleet key file: the secret, trimmed of surrounding
// white space, at least MinFleetKeyLen characters. key names the setting
// in errors.
func ReadFleetKey(key, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", errdefs.Invalid("%s: reading %s: %v; write a secret of at least %d characters there (e.g. `head -c 32 /dev/urandom | base64 > %s`)", key, path, err, MinFleetKeyLen, path)
	}
	s := strings.TrimSpace(string(b))
	if len(s) < MinFleetKeyLen {
		return "", errdefs.Invalid("%s: %s holds %d characters; the fleet key must be at least %d (e.g. `head -c 32 /dev/urandom | base64 > %s`)", key, path, len(s), MinFleetKeyLen, path)
	}
	if strings.ContainsAny(s, " \t\r\n") {
		return "", errdefs.Invalid("%s: %s must hold one secret with no white space inside", key, path)
	}
	return s, nil
}

// validNodeID reports whether s is a node id: NodeIDLen characters of
// api.IDAlphabet.
func validNodeID(s string) bool { return len(s) == api.NodeIDLen && api.InIDAlphabet(s) }

// validateFleet adds the role's, node_id's and [fleet]'s problems to v.
func (c Config) validateFleet(v *validator) {
	switch c.Role {
	case RoleNode, RoleGateway:
	default:
		v.addf("role must be %q (a daemon with sandboxes) or %q (a fleet gateway, docs/cluster.md), got %q", RoleNode, RoleGateway, c.Role)
	}
	if c.NodeID != "" && c.NodeID != NodeIDAuto && !validNodeID(c.NodeID) {
		v.addf("node_id must be exactly %d characters of a-z and 2-7 (such as \"n2a\"), unique in the fleet, or \"\" for none; got %q", api.NodeIDLen, c.NodeID)
	}
	f := c.Fleet
	if f.GatewayKeyFile != "" && !filepath.IsAbs(f.GatewayKeyFile) {
		v.addf("fleet.gateway_key_file must be an absolute path, got %q", f.GatewayKeyFile)
	}
	if f.PollInterval < 100*time.Millisecond || f.PollInterval > time.Minute {
		v.addf("fleet.poll_interval must be between 100ms and 1m, got %s", f.PollInterval)
	}
	if f.Candidates < 1 || f.Candidates > 64 {
		v.addf("fleet.candidates must be between 1 and 64, got %d", f.Candidates)
	}
	if c.Role != RoleGateway {
		if f.KeyFile != "" || len(f.Nodes) > 0 || f.Registry != "" {
			v.addf("fleet.key_file, fleet.registry and [[fleet.node]] are a gateway's settings: set role = \"gateway\", or remove them from a node's config (a node names the gateway's key in fleet.gateway_key_file)")
		}
		return
	}
	if c.NodeID != "" {
		v.addf("node_id is a node's setting; a gateway has no sandboxes of its own: remove it")
	}
	if f.GatewayKeyFile != "" {
		v.addf("fleet.gateway_key_file is a node's setting; a gateway sends the key in fleet.key_file")
	}
	if f.KeyFile == "" {
		v.addf("a gateway needs fleet.key_file: the file holding the secret its nodes name in fleet.gateway_key_file")
	} else if !filepath.IsAbs(f.KeyFile) {
		v.addf("fleet.key_file must be an absolute path, got %q", f.KeyFile)
	}
	if len(f.Nodes) == 0 && !c.Kubernetes.Enabled {
		v.addf("a gateway needs at least one [[fleet.node]] with id and url, e.g. [[fleet.node]] id = \"n2a\" url = \"http://192.0.2.11:7423\", or [kubernetes] enabled = true to take the nodes from a cluster")
	}
	if f.Registry != "" {
		if err := ValidFleetRegistry(f.Registry); err != nil {
			v.addf("%v", err)
		}
	}
	if len(c.Pools) > 0 {
		v.addf("[[pool]] is a node's setting; a gateway has no sandboxes: move the pools to the nodes' configs")
	}
	seen := map[string]bool{}
	for i, n := range f.Nodes {
		if !validNodeID(n.ID) {
			v.addf("fleet.node[%d].id must be the node's node_id, %d characters of a-z and 2-7, got %q", i, api.NodeIDLen, n.ID)
		} else if seen[n.ID] {
			v.addf("fleet.node[%d].id %q is listed twice; every node needs a node_id of its own", i, n.ID)
		}
		seen[n.ID] = true
		u, err := url.Parse(n.URL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			v.addf("fleet.node[%d].url must be the node's API as http://HOST:PORT or https://HOST:PORT, got %q", i, n.URL)
		} else if (n.Fingerprint != "" || n.CAFile != "") && u.Scheme != "https" {
			v.addf("fleet.node[%d]: fingerprint and ca_file say whom to trust over TLS; the url %q is plain http: make it https://", i, n.URL)
		}
		if n.Fingerprint != "" && n.CAFile != "" {
			v.addf("fleet.node[%d]: set fingerprint (trust the one certificate) or ca_file (trust what these authorities sign), not both", i)
		}
	}
}

// fleetRepoRE is a repository path prefix: lowercase components of the
// OCI distribution spec, separated by '/'.
var fleetRepoRE = regexp.MustCompile(`^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*$`)

// ValidFleetRegistry checks fleet.registry: HOST:PORT/PREFIX, or
// HOST/PREFIX with a host that has a dot (the gateway appends
// "/templates/NAME:TAG" and "/snapshots/ID:TAG" to it).
func ValidFleetRegistry(s string) error {
	host, prefix, ok := strings.Cut(s, "/")
	bad := func(why string) error {
		return errdefs.Invalid("fleet.registry must be the fleet's OCI registry as HOST:PORT/PREFIX (e.g. \"192.0.2.1:5000/agentbox\"), got %q: %s", s, why)
	}
	if !ok || host == "" || prefix == "" {
		return bad("a host and a repository prefix are needed")
	}
	if !strings.ContainsAny(host, ".:") && host != "localhost" {
		return bad("the host needs a port or a dot, as a registry's does")
	}
	if strings.ContainsAny(host, " /@\t") {
		return bad("the host has characters a host cannot have")
	}
	if !fleetRepoRE.MatchString(strings.TrimSuffix(prefix, "/")) {
		return bad("the prefix must be lowercase path components (a-z, 0-9, '.', '_', '-')")
	}
	return nil
}
