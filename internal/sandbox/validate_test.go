package sandbox

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
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

func TestResolveUserLimits(t *testing.T) {
	d := api.DefaultUserLimits
	tpl := &api.UserLimits{InotifyWatches: 262144, Sigpending: 1024}
	for _, c := range []struct {
		tpl, req *api.UserLimits
		want     api.UserLimits
		err      string
	}{
		{nil, nil, d, ""},
		{tpl, nil, api.UserLimits{InotifyInstances: d.InotifyInstances, InotifyWatches: 262144, MsgqueueBytes: d.MsgqueueBytes, Sigpending: 1024}, ""},
		{tpl, &api.UserLimits{Sigpending: 9, InotifyInstances: 300}, api.UserLimits{InotifyInstances: 300, InotifyWatches: 262144, MsgqueueBytes: d.MsgqueueBytes, Sigpending: 9}, ""},
		{nil, &api.UserLimits{MsgqueueBytes: -1}, api.UserLimits{}, "user_limits.msgqueue_bytes must be between 1 and 819200"},
		{nil, &api.UserLimits{InotifyInstances: 1025}, api.UserLimits{}, "user_limits.inotify_instances must be between 1 and 1024"},
	} {
		got, err := resolveUserLimits(c.tpl, c.req)
		if c.err != "" {
			if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%+v over %+v: %v, want %q", c.req, c.tpl, err, c.err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%+v over %+v: %+v, %v; want %+v", c.req, c.tpl, got, err, c.want)
		}
	}
}
