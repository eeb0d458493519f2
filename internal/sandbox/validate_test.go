package sandbox

import (
	"strings"
	"testing"
	"time"
)

func TestCheckTTLLimit(t *testing.T) {
	tests := []struct {
		name    string
		limit   time.Duration
		ttl     time.Duration
		asked   int64
		wantErr string
	}{
		{"within", 24 * time.Hour, time.Hour, 3600, ""},
		{"at the limit", 24 * time.Hour, 24 * time.Hour, 86400, ""},
		{"above", 24 * time.Hour, 25 * time.Hour, 90000, "ttl_seconds must be at most 86400 (24h, limits.ttl"},
		{"none under a limit", 24 * time.Hour, 0, -1, `refuses sandboxes without a TTL: its limits.ttl is 24h (ttl_seconds at most 86400); give a TTL, or set limits.ttl = "0"`},
		{"no limit, none", 0, 0, -1, ""},
		{"no limit, long", 0, 1000 * time.Hour, 3600000, ""},
		{"odd limit", 90 * time.Minute, 2 * time.Hour, 7200, "(1h30m, limits.ttl"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := checkTTLLimit(tt.limit, tt.ttl, tt.asked)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("got %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
