package config

import (
	"net"
	"path/filepath"
	"strconv"
	"strings"
)

// Registry ([registry]) configures the OCI registries that templates and
// snapshots are pushed to and pulled from (docs/cluster.md,
// internal/registry). Every registry is reached over HTTPS unless its
// host is listed in Insecure.
type Registry struct {
	// Insecure (insecure) lists the registries reached over plain HTTP:
	// "HOST:PORT" for one port, or "HOST" for every port of that host
	// (e.g. "127.0.0.1" for test registries on loopback). A registry not
	// listed is only ever reached over HTTPS, loopback and private
	// addresses included. Default: none.
	Insecure []string `toml:"insecure"`
	// AuthFile (auth_file) is a docker-style config.json whose "auths"
	// give the credentials of each registry (auth, or username and
	// password, or identitytoken/registrytoken). Default "" (anonymous).
	// Read at each push and pull; its contents are never logged.
	AuthFile string `toml:"auth_file"`
	// TenantRegistries (tenant_registries) lists the registries ("HOST"
	// or "HOST:PORT") that tenants' keys may push to and pull from; the
	// daemon connects to them on a tenant's word, so the list keeps it
	// from reaching other hosts for a tenant. The admin's key may use any
	// registry. Default: none (pushes and pulls need the admin's key).
	TenantRegistries []string `toml:"tenant_registries"`
}

// validateRegistry adds the [registry] section's problems to v.
func (c Config) validateRegistry(v *validator) {
	r := c.Registry
	if r.AuthFile != "" && !filepath.IsAbs(r.AuthFile) {
		v.addf("registry.auth_file must be an absolute path to a docker-style config.json, got %q", r.AuthFile)
	}
	for _, h := range r.Insecure {
		if !validRegistryHost(h) {
			v.addf("registry.insecure entries must be HOST or HOST:PORT such as \"127.0.0.1:5000\" (no scheme, no path), got %q", h)
		}
	}
	for _, h := range r.TenantRegistries {
		if !validRegistryHost(h) {
			v.addf("registry.tenant_registries entries must be HOST or HOST:PORT such as \"registry.example.com\" (no scheme, no path), got %q", h)
		}
	}
}

// validRegistryHost reports whether h is HOST or HOST:PORT.
func validRegistryHost(h string) bool {
	if h == "" || strings.ContainsAny(h, "/ @") {
		return false
	}
	host := h
	if hh, port, err := net.SplitHostPort(h); err == nil {
		if p, err := strconv.Atoi(port); err != nil || p < 1 || p > 65535 {
			return false
		}
		host = hh
	} else if strings.Count(h, ":") == 1 {
		return false // a port that did not parse
	}
	return host != "" && !strings.ContainsAny(host, "[]")
}
