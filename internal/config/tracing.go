package config

import "net/url"

// Tracing ([tracing]) configures OpenTelemetry traces of creates and
// execs, exported over OTLP/HTTP; see docs/observability.md. Off unless
// endpoint is set.
type Tracing struct {
	// Endpoint (endpoint) is the OTLP/HTTP receiver's base URL, e.g.
	// "http://127.0.0.1:4318": spans are POSTed to <endpoint>/v1/traces
	// as protobuf. Default "" (tracing off: no span is made).
	Endpoint string `toml:"endpoint"`
	// SampleRatio (sample_ratio) is the share of API requests traced,
	// 0 to 1. Default 1 (all of them).
	SampleRatio float64 `toml:"sample_ratio"`
}

// validateTracing adds the [tracing] section's problems to v.
func (c Config) validateTracing(v *validator) {
	t := c.Tracing
	if t.SampleRatio < 0 || t.SampleRatio > 1 {
		v.addf("tracing.sample_ratio must be between 0 and 1, got %g", t.SampleRatio)
	}
	if t.Endpoint == "" {
		return
	}
	u, err := url.Parse(t.Endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		v.addf("tracing.endpoint must be an http:// or https:// URL such as http://127.0.0.1:4318, got %q", t.Endpoint)
	}
}
