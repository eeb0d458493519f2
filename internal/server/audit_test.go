package server

import (
	"net/http/httptest"
	"testing"
)

func TestStateChanging(t *testing.T) {
	for _, c := range []struct {
		method, upgrade string
		want            bool
	}{
		{"POST", "", true}, {"PUT", "", true}, {"PATCH", "", true}, {"DELETE", "", true},
		{"GET", "", false}, {"HEAD", "", false}, {"OPTIONS", "", false},
		{"GET", "websocket", true}, {"GET", "WebSocket", true}, {"GET", "h2c, websocket", true}, {"GET", "h2c", false},
	} {
		r := httptest.NewRequest(c.method, "/v1/sandboxes/x/pty/1/ws", nil)
		if c.upgrade != "" {
			r.Header.Set("Upgrade", c.upgrade)
		}
		if got := stateChanging(r); got != c.want {
			t.Errorf("%s with Upgrade %q: audited = %v, want %v", c.method, c.upgrade, got, c.want)
		}
	}
}
