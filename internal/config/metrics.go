package config

import (
	"net"
	"time"
)

// Metrics ([metrics]) configures GET /metrics (the Prometheus
// exposition), the per-sandbox usage samples and the event stream; see
// docs/observability.md.
type Metrics struct {
	// ScrapeToken (scrape_token) is a bearer token that may read GET
	// /metrics besides admin keys, for a Prometheus that should hold no
	// API key. At least 16 characters. Default "" (admin keys only).
	ScrapeToken string `toml:"scrape_token"`
	// Listen (listen) is a separate TCP address serving only GET
	// /metrics (plain HTTP), e.g. "127.0.0.1:9423". Beyond loopback it
	// needs scrape_token. Default "" (none: /metrics is on the API).
	Listen string `toml:"listen"`
	// UsageInterval (usage_interval) is how often every sandbox's usage
	// is sampled (GET /v1/sandboxes/{id}/metrics); the last hour is kept.
	// 1s to 1m. Default "5s".
	UsageInterval time.Duration `toml:"usage_interval"`
}

// validateMetrics adds the [metrics] section's problems to v.
func (c Config) validateMetrics(v *validator) {
	m := c.Metrics
	if m.ScrapeToken != "" && len(m.ScrapeToken) < 16 {
		v.addf("metrics.scrape_token must be at least 16 characters, got %d; generate one with `openssl rand -hex 16`", len(m.ScrapeToken))
	}
	if m.Listen != "" {
		host, _, err := net.SplitHostPort(m.Listen)
		switch {
		case err != nil:
			v.addf("metrics.listen must be host:port, got %q", m.Listen)
		case m.ScrapeToken == "" && !loopbackHost(host):
			v.addf("metrics.listen %q is not a loopback address: set metrics.scrape_token so that only your Prometheus can read it", m.Listen)
		}
	}
	if m.UsageInterval < time.Second || m.UsageInterval > time.Minute {
		v.addf("metrics.usage_interval must be between 1s and 1m, got %v", m.UsageInterval)
	}
}

func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
