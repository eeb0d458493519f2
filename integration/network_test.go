package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/agentbox/agentbox/api"
	"github.com/agentbox/agentbox/client"
)

// unixHTTP is an HTTP client that sends every request, whatever its URL's
// host, to the daemon's socket: the Host header picks the preview route.
func unixHTTP() *http.Client {
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", env.cfg.Socket)
		},
	}, Timeout: 30 * time.Second}
}

// startPreviewServer uploads testdata/network/preview_server.py into a new
// base sandbox, starts it on 127.0.0.1:port and waits until the proxy
// reaches it.
func startPreviewServer(t *testing.T, req api.CreateSandboxRequest, port int) *api.Sandbox {
	t.Helper()
	needBase(t)
	ctx := context.Background()
	id := newSandbox(t, req)
	src, err := os.Open(filepath.Join("testdata", "network", "preview_server.py"))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	if _, err := env.client.WriteFile(ctx, id, "/tmp/preview_server.py", src, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := env.client.StartProcess(ctx, id, api.StartProcessRequest{
		Cmd: []string{"python3", "/tmp/preview_server.py", fmt.Sprint(port)}}); err != nil {
		t.Fatal(err)
	}
	sb, err := env.client.GetSandbox(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	hc := unixHTTP()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := hc.Do(previewReq(t, sb, port, "/headers", true))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return sb
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("the test server in %s never answered through the proxy: %v %v", id, err, resp)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// previewReq is a host-form request, with the token header when withToken.
func previewReq(t *testing.T, sb *api.Sandbox, port int, path string, withToken bool) *http.Request {
	t.Helper()
	req, err := http.NewRequest("GET", fmt.Sprintf("http://%d-%s.localhost%s", port, sb.ID, path), nil)
	if err != nil {
		t.Fatal(err)
	}
	if withToken {
		req.Header.Set(api.PreviewTokenHeader, sb.Network.PreviewToken)
	}
	return req
}

func TestPreviewURLs(t *testing.T) {
	const port = 8000
	sb := startPreviewServer(t, api.CreateSandboxRequest{Template: "base"}, port)
	n := sb.Network
	if n == nil || n.Egress != api.EgressNone || n.Preview != api.PreviewTokenMode || len(n.PreviewToken) < 32 || n.PreviewDomain == "" {
		t.Fatalf("network of a default sandbox = %+v; want egress none, preview token, a token of 32+ chars and a domain", n)
	}
	hc := unixHTTP()
	get := func(req *http.Request) (int, string, http.Header) {
		t.Helper()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("%s %s: %v", req.Method, req.URL, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), resp.Header
	}
	type echo struct {
		Path    string            `json:"path"`
		Headers map[string]string `json:"headers"`
	}
	decode := func(body string) echo {
		t.Helper()
		var e echo
		if err := json.Unmarshal([]byte(body), &e); err != nil {
			t.Fatalf("echo body %q: %v", body, err)
		}
		return e
	}
	pathURL := "http://daemon" + client.PortPath(sb.ID, port)

	t.Run("access", func(t *testing.T) {
		wrong := previewReq(t, sb, port, "/headers", false)
		wrong.Header.Set(api.PreviewTokenHeader, strings.Repeat("x", 32))
		noKey, _ := http.NewRequest("GET", pathURL+"headers", nil)
		withKey, _ := http.NewRequest("GET", pathURL+"headers?a=1&"+api.PreviewTokenQuery+"=nope", nil)
		withKey.Header.Set("Authorization", "Bearer "+env.key)
		withTokenHdr, _ := http.NewRequest("GET", pathURL+"headers", nil)
		withTokenHdr.Header.Set(api.PreviewTokenHeader, n.PreviewToken)
		query := previewReq(t, sb, port, "/headers?b=2&"+api.PreviewTokenQuery+"="+n.PreviewToken, false)
		cookie := previewReq(t, sb, port, "/headers", false)
		cookie.AddCookie(&http.Cookie{Name: api.PreviewTokenCookie, Value: n.PreviewToken})
		cookie.AddCookie(&http.Cookie{Name: "app", Value: "kept"})
		otherSandbox := previewReq(t, sb, port, "/headers", false)
		otherSandbox.Host = fmt.Sprintf("%d-%s.localhost", port, "nosuchsandbox")
		cases := []struct {
			name     string
			req      *http.Request
			status   int
			wantPath string
		}{
			{"host form, no token", previewReq(t, sb, port, "/headers", false), 401, ""},
			{"host form, wrong token", wrong, 401, ""},
			{"host form, token header", previewReq(t, sb, port, "/headers", true), 200, "/headers"},
			{"host form, token query", query, 200, "/headers?b=2"},
			{"host form, token cookie", cookie, 200, "/headers"},
			{"host form, unknown sandbox", otherSandbox, 404, ""},
			{"path form, no credentials", noKey, 401, ""},
			{"path form, API key", withKey, 200, "/headers?a=1"},
			{"path form, token header", withTokenHdr, 200, "/headers"},
		}
		for _, c := range cases {
			status, body, hdr := get(c.req)
			if status != c.status {
				t.Errorf("%s: status %d, want %d (%s)", c.name, status, c.status, body)
				continue
			}
			if status != 200 {
				continue
			}
			e := decode(body)
			if e.Path != c.wantPath {
				t.Errorf("%s: the server saw path %q, want %q", c.name, e.Path, c.wantPath)
			}
			for k, v := range e.Headers {
				if strings.Contains(v, n.PreviewToken) || strings.Contains(v, env.key) {
					t.Errorf("%s: header %s leaked agentbox credentials to the sandbox: %q", c.name, k, v)
				}
			}
			if c.name == "host form, token query" && !strings.Contains(hdr.Get("Set-Cookie"), api.PreviewTokenCookie+"=") {
				t.Errorf("%s: no token cookie set (Set-Cookie %q)", c.name, hdr.Get("Set-Cookie"))
			}
			if c.name == "host form, token cookie" && !strings.Contains(e.Headers["Cookie"], "app=kept") {
				t.Errorf("%s: the app's own cookie was dropped: %q", c.name, e.Headers["Cookie"])
			}
		}
	})

	t.Run("python http.server", func(t *testing.T) {
		mustSh(t, sb.ID, "mkdir -p /tmp/site && echo hello-preview > /tmp/site/index.txt && cd /tmp/site && (python3 -m http.server 8001 --bind 127.0.0.1 >/dev/null 2>&1 &)")
		var status int
		var body string
		for i := 0; i < 100; i++ {
			if status, body, _ = get(previewReq(t, sb, 8001, "/index.txt", true)); status == 200 {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if status != 200 || body != "hello-preview\n" {
			t.Fatalf("host form: %d %q", status, body)
		}
		req, _ := http.NewRequest("GET", "http://daemon"+client.PortPath(sb.ID, 8001)+"index.txt", nil)
		req.Header.Set("Authorization", "Bearer "+env.key)
		if status, body, _ = get(req); status != 200 || body != "hello-preview\n" {
			t.Fatalf("path form: %d %q", status, body)
		}
		// The URL `agentbox url` prints names the same host.
		u, err := client.PreviewURL(sb, 8001)
		if err != nil || !strings.HasPrefix(u, "http://8001-"+sb.ID+"."+n.PreviewDomain+"/?"+api.PreviewTokenQuery+"=") {
			t.Fatalf("PreviewURL = %q, %v", u, err)
		}
		if out, errOut, code := cli(t, "", "url", sb.ID, "8001"); code != 0 || strings.TrimSpace(out) != u {
			t.Fatalf("agentbox url = %q (exit %d, %s), want %q", out, code, errOut, u)
		}
		if _, _, code := cli(t, "", "url", sb.ID, "99999"); code == 0 {
			t.Fatal("agentbox url with port 99999 succeeded")
		}
	})

	t.Run("latency", func(t *testing.T) {
		// Sequential small GETs through the host form, keep-alive on both
		// legs; logged for docs/network.md.
		const n = 100
		start := time.Now()
		for i := 0; i < n; i++ {
			if status, _, _ := get(previewReq(t, sb, port, "/headers", true)); status != 200 {
				t.Fatalf("request %d: status %d", i, status)
			}
		}
		t.Logf("preview proxy: %d sequential GETs (keep-alive server), %v per request", n, time.Since(start)/n)
		mustSh(t, sb.ID, "mkdir -p /tmp/s2 && cd /tmp/s2 && echo x > i.txt && (python3 -m http.server 8002 --bind 127.0.0.1 >/dev/null 2>&1 &) && sleep 1")
		start = time.Now()
		for i := 0; i < n; i++ {
			if status, _, _ := get(previewReq(t, sb, 8002, "/i.txt", true)); status != 200 {
				t.Fatalf("request %d: status %d", i, status)
			}
		}
		t.Logf("preview proxy: %d sequential GETs (python3 -m http.server, a new connection each), %v per request", n, time.Since(start)/n)
	})

	t.Run("nothing listening", func(t *testing.T) {
		status, body, _ := get(previewReq(t, sb, 8009, "/", true))
		if status != http.StatusServiceUnavailable || !strings.Contains(body, "8009") {
			t.Fatalf("status %d %q, want 503 naming the port", status, body)
		}
	})

	t.Run("server-sent events stream", func(t *testing.T) {
		start := time.Now()
		resp, err := hc.Do(previewReq(t, sb, port, "/sse", true))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		br := bufio.NewReader(resp.Body)
		line, err := br.ReadString('\n')
		if err != nil || line != "data: tick 0\n" {
			t.Fatalf("first event: %q %v", line, err)
		}
		// The server sends the second event only once /release is asked
		// for (or after 60 s): a proxy that buffers the stream delivers
		// nothing before that.
		if took := time.Since(start); took > 30*time.Second {
			t.Fatalf("the first event took %v: the proxy buffered the stream", took)
		}
		if status, body, _ := get(previewReq(t, sb, port, "/release", true)); status != http.StatusNoContent {
			t.Fatalf("release: %d %q", status, body)
		}
		rest, _ := io.ReadAll(br)
		if !strings.Contains(string(rest), "data: tick 1") {
			t.Fatalf("second event missing: %q", rest)
		}
	})

	t.Run("websocket echo", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		for _, u := range []string{
			fmt.Sprintf("ws://%d-%s.localhost/ws", port, sb.ID),
			"ws://daemon" + client.PortPath(sb.ID, port) + "ws",
		} {
			c, _, err := websocket.Dial(ctx, u, &websocket.DialOptions{HTTPClient: unixHTTP(),
				HTTPHeader: http.Header{api.PreviewTokenHeader: {n.PreviewToken}}})
			if err != nil {
				t.Fatalf("dial %s: %v", u, err)
			}
			c.SetReadLimit(1 << 20)
			for i, msg := range []string{"hello", strings.Repeat("big", 30000)} {
				if err := c.Write(ctx, websocket.MessageText, []byte(msg)); err != nil {
					t.Fatal(err)
				}
				typ, got, err := c.Read(ctx)
				if err != nil || typ != websocket.MessageText || string(got) != msg {
					t.Fatalf("%s: echo %d = %v %d bytes, %v", u, i, typ, len(got), err)
				}
			}
			c.Close(websocket.StatusNormalClosure, "")
		}
	})
}

func TestPreviewPublicAndValidation(t *testing.T) {
	sb := startPreviewServer(t, api.CreateSandboxRequest{Template: "base", Network: &api.Network{Preview: api.PreviewPublic}}, 8000)
	resp, err := unixHTTP().Do(previewReq(t, sb, 8000, "/headers", false))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("public preview without a token: status %d", resp.StatusCode)
	}
	u, _ := client.PreviewURL(sb, 8000)
	if strings.Contains(u, api.PreviewTokenQuery) {
		t.Fatalf("a public preview URL carries a token: %s", u)
	}
	for _, bad := range []api.Network{
		{Egress: "everything"},
		{Preview: "open"},
		{PreviewToken: "chosen-by-me"},
		{Egress: api.EgressNone, Allow: []string{"example.org"}},
	} {
		_, err := env.client.CreateSandbox(context.Background(), api.CreateSandboxRequest{Network: &bad})
		if err == nil {
			t.Errorf("create with network %+v succeeded, want an error", bad)
		}
	}
}
