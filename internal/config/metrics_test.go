package config

import (
	"strings"
	"testing"
	"time"
)

func TestValidateMetrics(t *testing.T) {
	tests := []struct {
		name string
		m    Metrics
		want string // "" for valid
	}{
		{"defaults", Metrics{UsageInterval: 5 * time.Second}, ""},
		{"loopback listen without token", Metrics{Listen: "127.0.0.1:9423", UsageInterval: time.Second}, ""},
		{"public listen with token", Metrics{Listen: "0.0.0.0:9423", ScrapeToken: strings.Repeat("x", 16), UsageInterval: time.Second}, ""},
		{"public listen without token", Metrics{Listen: "0.0.0.0:9423", UsageInterval: time.Second}, "set metrics.scrape_token"},
		{"short token", Metrics{ScrapeToken: "short", UsageInterval: time.Second}, "at least 16 characters"},
		{"bad listen", Metrics{Listen: "9423", UsageInterval: time.Second}, "host:port"},
		{"interval too short", Metrics{UsageInterval: 100 * time.Millisecond}, "usage_interval must be between 1s and 1m"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Metrics = tt.m
			checkValidate(t, c, tt.want)
		})
	}
}

// checkValidate fails t unless c.Validate answers nil (want "") or an
// error containing want.
func checkValidate(t *testing.T, c Config, want string) {
	t.Helper()
	err := c.Validate()
	switch {
	case want == "" && err != nil:
		t.Errorf("Validate = %v, want nil", err)
	case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
		t.Errorf("Validate = %v, want an error containing %q", err, want)
	}
}
