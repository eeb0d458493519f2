package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/errdefs"
)

// TestDestroyedNotFound: a destroyed sandbox answers like one that never
// existed, on every route that names a sandbox: 404 with code not_found,
// never 409 "is destroyed"; the CLI says so in the same words.
func TestDestroyedNotFound(t *testing.T) {
	hc := apiRawClient()
	for _, tier := range batteryTiers(t) {
		t.Run(tier, func(t *testing.T) {
			ctx := context.Background()
			sb, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Isolation: tier})
			if err != nil {
				t.Fatal(err)
			}
			if err := env.client.DestroySandbox(ctx, sb.ID); err != nil {
				t.Fatal(err)
			}
			checked := 0
			for _, id := range []string{sb.ID, "sb-unknown-" + randHex(8)} {
				fill := strings.NewReplacer("{id}", id, "{ref}", "1", "{pid}", "1", "{port}", "8000", "{path...}", "x")
				for _, r := range api.Routes {
					if !strings.HasPrefix(r.Path, api.SandboxPrefix) {
						continue
					}
					var body io.Reader
					if r.Method == "POST" || r.Method == "PUT" || r.Method == "PATCH" {
						body = strings.NewReader(`{}`)
					}
					path := fill.Replace(r.Path)
					if strings.Contains(path, "/files") {
						path += "?path=/tmp/x"
					}
					code, resp := rawDo(t, hc, r.Method, path, env.key, body)
					checked++
					var e struct {
						Error struct{ Code, Message string } `json:"error"`
					}
					_ = json.Unmarshal([]byte(resp), &e)
					if code != 404 || e.Error.Code != "not_found" {
						t.Errorf("%s %s = %d %s, want 404 not_found", r.Method, path, code, truncate(resp, 200))
					}
				}
			}
			evidence(t, "%d requests on %d sandbox routes, each 404 not_found", checked, checked/2)
			_, errOut, code := cli(t, "", "exec", sb.ID, "--", "true")
			if code == 0 || !strings.Contains(errOut, "not found") || !strings.Contains(errOut, "destroyed") {
				t.Errorf("agentbox exec on a destroyed sandbox: exit %d, stderr %q; want an error saying it was destroyed and is not found", code, errOut)
			}
			if _, errOut, code := cli(t, "", "rm", sb.ID); code == 0 || !strings.Contains(errOut, "not found") {
				t.Errorf("agentbox rm of a destroyed sandbox: exit %d, stderr %q; want not found", code, errOut)
			}
		})
	}
}

// TestOversizedCreate: a create whose body is over the daemon's JSON limit
// is answered 413 before the body is read (no 100 Continue for a client
// that asks), and the Go SDK returns its invalid-argument error.
func TestOversizedCreate(t *testing.T) {
	ctx := context.Background()
	_, err := env.client.CreateSandbox(ctx, api.CreateSandboxRequest{Template: "busybox", Env: map[string]string{"BIG": strings.Repeat("x", 2<<20)}})
	if !errors.Is(err, errdefs.ErrInvalidArgument) || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("create with a 2 MiB env: %v, want invalid argument saying the body is too large", err)
	}
	conn, err := net.Dial("unix", env.cfg.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(conn, "POST /v1/sandboxes HTTP/1.1\r\nHost: agentbox\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", env.key, 50<<20)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || !strings.Contains(string(body), "invalid_argument") {
		t.Fatalf("50 MB Content-Length with Expect: 100-continue: first answer %d %s, want 413 invalid_argument", resp.StatusCode, body)
	}
	evidence(t, "2 MiB create: %v; 50 MB Content-Length: %d before any body byte", err, resp.StatusCode)
}
