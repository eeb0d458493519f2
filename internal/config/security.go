package config

import (
	"net"
	"path/filepath"
)

// Security ([security]) configures the API's transport and its abuse
// limits; see docs/SECURITY.md.
type Security struct {
	// TLS (tls) is "" (TLS when tls_cert and tls_key are set, none
	// otherwise) or "self-signed": a certificate and key generated on the
	// first start into <data_dir>/tls/, whose SHA-256 fingerprint the
	// daemon logs for clients to pin (AGENTBOX_TLS_FINGERPRINT).
	TLS string `toml:"tls"`
	// TLSCert and TLSKey (tls_cert, tls_key) are PEM files of the API's
	// certificate (chain) and private key. Default "" (none).
	TLSCert string `toml:"tls_cert"`
	TLSKey  string `toml:"tls_key"`
	// InsecurePlainHTTP (insecure_plain_http) lets listen be a
	// non-loopback address without TLS: API keys then cross the network
	// in the clear. Default false.
	InsecurePlainHTTP bool `toml:"insecure_plain_http"`
	// RateLimit and RateBurst (rate_limit, rate_burst) are each API key's
	// token bucket: requests per second on average and at once. 0 turns
	// the limit off. Defaults 50 and 200.
	RateLimit float64 `toml:"rate_limit"`
	RateBurst int     `toml:"rate_burst"`
}

// TLSMode says how the TCP listener serves: "off", "files" or
// "self-signed".
func (c Config) TLSMode() string {
	switch {
	case c.Security.TLS == "self-signed":
		return "self-signed"
	case c.Security.TLSCert != "" || c.Security.TLSKey != "":
		return "files"
	}
	return "off"
}

// SelfSignedDir is where a generated certificate and key are kept.
func (c Config) SelfSignedDir() string { return filepath.Join(c.DataDir, "tls") }

// ListenIsLoopback reports whether listen only reaches this host.
func (c Config) ListenIsLoopback() bool {
	host, _, err := net.SplitHostPort(c.Listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validateSecurity adds the [security] section's problems to v.
func (c Config) validateSecurity(v *validator) {
	s := c.Security
	if s.TLS != "" && s.TLS != "self-signed" {
		v.addf("security.tls must be \"\" or \"self-signed\", got %q; for your own certificate set tls_cert and tls_key", s.TLS)
	}
	if (s.TLSCert == "") != (s.TLSKey == "") {
		v.addf("security.tls_cert and security.tls_key must be set together")
	}
	if s.TLS == "self-signed" && s.TLSCert != "" {
		v.addf("security.tls = \"self-signed\" and tls_cert are exclusive: choose one")
	}
	for k, p := range map[string]string{"tls_cert": s.TLSCert, "tls_key": s.TLSKey} {
		if p != "" && !filepath.IsAbs(p) {
			v.addf("security.%s must be an absolute path, got %q", k, p)
		}
	}
	if s.RateLimit < 0 || s.RateBurst < 0 {
		v.addf("security.rate_limit and rate_burst must be >= 0 (0 turns the limit off), got %g and %d", s.RateLimit, s.RateBurst)
	}
	if s.RateLimit > 0 && s.RateBurst < 1 {
		v.addf("security.rate_burst must be >= 1 when rate_limit is set, got %d", s.RateBurst)
	}
	if c.Listen != "" && !c.ListenIsLoopback() && c.TLSMode() == "off" && !s.InsecurePlainHTTP {
		v.addf("listen %q is not a loopback address: serve TLS beyond loopback (security.tls = \"self-signed\", or tls_cert and tls_key), or set security.insecure_plain_http = true to send API keys in the clear", c.Listen)
	}
}
