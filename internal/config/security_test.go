package config

import (
	"strings"
	"testing"
)

func TestValidateSecurity(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(c *Config)
		wantErr string // "" = valid
	}{
		{"loopback plain", func(c *Config) { c.Listen = "127.0.0.1:7423" }, ""},
		{"localhost plain", func(c *Config) { c.Listen = "localhost:7423" }, ""},
		{"ipv6 loopback plain", func(c *Config) { c.Listen = "[::1]:7423" }, ""},
		{"wildcard plain refused", func(c *Config) { c.Listen = "0.0.0.0:7423" }, "not a loopback address"},
		{"empty host plain refused", func(c *Config) { c.Listen = ":7423" }, "not a loopback address"},
		{"wildcard forced", func(c *Config) { c.Listen = ":7423"; c.Security.InsecurePlainHTTP = true }, ""},
		{"wildcard self-signed", func(c *Config) { c.Listen = ":7423"; c.Security.TLS = "self-signed" }, ""},
		{"wildcard files", func(c *Config) {
			c.Listen = ":7423"
			c.Security.TLSCert, c.Security.TLSKey = "/etc/a.pem", "/etc/a.key"
		}, ""},
		{"cert without key", func(c *Config) { c.Security.TLSCert = "/etc/a.pem" }, "set together"},
		{"relative cert", func(c *Config) { c.Security.TLSCert, c.Security.TLSKey = "a.pem", "/k" }, "absolute path"},
		{"unknown tls mode", func(c *Config) { c.Security.TLS = "yes" }, `"self-signed"`},
		{"negative rate", func(c *Config) { c.Security.RateLimit = -1 }, "rate_limit"},
		{"rate without burst", func(c *Config) { c.Security.RateBurst = 0 }, "rate_burst"},
		{"rate off", func(c *Config) { c.Security.RateLimit, c.Security.RateBurst = 0, 0 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
