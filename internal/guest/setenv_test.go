package guest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/internal/guest/proto"
)

// PUT /env replaces the default environment of later execs; a malformed
// entry is refused and changes nothing.
func TestSetEnvRoute(t *testing.T) {
	g := newTestGuest(t, Config{Env: []string{"A=boot", "PATH=/usr/bin:/bin"}})
	put := func(env []string) int {
		b, _ := json.Marshal(proto.GuestEnv{Env: env})
		req, _ := http.NewRequest("PUT", "http://guest"+proto.SetEnv.Path, bytes.NewReader(b))
		resp, err := g.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	echo := func() string {
		return strings.TrimSpace(g.mustExec(t, api.ExecRequest{Shell: `echo "$A $B"`}).Stdout)
	}
	if got := echo(); got != "boot" {
		t.Fatalf("before: %q", got)
	}
	if code := put([]string{"A=new", "B=2", "PATH=/usr/bin:/bin"}); code != http.StatusNoContent {
		t.Fatalf("PUT /env: %d", code)
	}
	if got := echo(); got != "new 2" {
		t.Errorf("after PUT /env: %q, want %q", got, "new 2")
	}
	if code := put([]string{"NOEQUALS"}); code != http.StatusBadRequest {
		t.Errorf("PUT /env with a malformed entry: %d, want 400", code)
	}
	if got := echo(); got != "new 2" {
		t.Errorf("a refused PUT changed the env: %q", got)
	}
}
