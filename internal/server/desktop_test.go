package server

import (
	"net/url"
	"testing"

	"github.com/agentbox/agentbox/api"
)

func TestStreamURL(t *testing.T) {
	sb := &api.Sandbox{ID: "sb1", Network: &api.Network{PreviewDomain: "localhost:7423", PreviewToken: "tok"}}
	got, err := streamURL(sb, 6080, "pw&x", true)
	if err != nil {
		t.Fatal(err)
	}
	u, err := url.Parse(got)
	if err != nil {
		t.Fatal(err)
	}
	if u.Host != "6080-sb1.localhost:7423" || u.Path != "/vnc.html" {
		t.Errorf("url %s: host %s path %s", got, u.Host, u.Path)
	}
	q := u.Query()
	for k, want := range map[string]string{api.PreviewTokenQuery: "tok", "password": "pw&x", "view_only": "true",
		"autoconnect": "true", "path": "websockify"} {
		if q.Get(k) != want {
			t.Errorf("%s = %q, want %q (%s)", k, q.Get(k), want, got)
		}
	}
	sb.Network.Preview = api.PreviewPublic
	got, _ = streamURL(sb, 6080, "pw", false)
	if u, _ := url.Parse(got); u.Query().Has(api.PreviewTokenQuery) || u.Query().Get("view_only") != "false" {
		t.Errorf("public preview: %s", got)
	}
}
