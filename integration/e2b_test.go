package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// e2bSDKDir installs the pinned e2b SDKs of integration/e2b (package.json
// and its committed package-lock.json) with npm ci, installing Node.js and
// npm first where they are missing, and returns the directory.
func e2bSDKDir(t *testing.T) string {
	t.Helper()
	e2bInstall.Do(func() { e2bInstall.dir, e2bInstall.err = installE2BSDK() })
	if e2bInstall.err != nil {
		t.Fatal(e2bInstall.err)
	}
	return e2bInstall.dir
}

var e2bInstall struct {
	sync.Once
	dir string
	err error
}

func installE2BSDK() (string, error) {
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			cmd := exec.Command(filepath.Join(env.repo, "scripts", "install-test-deps.sh"))
			if out, err := cmd.CombinedOutput(); err != nil {
				return "", fmt.Errorf("installing Node.js and npm (scripts/install-test-deps.sh): %v\n%s", err, out)
			}
			break
		}
	}
	dir, err := filepath.Abs("e2b")
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("npm ci in integration/e2b: %v\n%s", err, out)
	}
	return dir, nil
}

// runE2BTests runs one test file of integration/e2b with Node's test
// runner against the test daemon's E2B API, with only the variables
// docs/e2b.md tells users to set.
func runE2BTests(t *testing.T, file string, extraEnv ...string) {
	t.Helper()
	addr := loopbackToSocket(t)
	runNodeTests(t, []string{file}, append([]string{
		"E2B_API_URL=http://" + addr + "/e2b",
		"E2B_SANDBOX_URL=http://" + addr + "/e2b",
		"E2B_API_KEY=" + env.key,
	}, extraEnv...))
}

// runNodeTests runs Node's test runner in integration/e2b with args (the
// test file last) and, of the E2B variables, only those of vars.
func runNodeTests(t *testing.T, args, vars []string) {
	t.Helper()
	dir := e2bSDKDir(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", append([]string{"--test", "--test-concurrency=1", "--test-reporter=spec"}, args...)...)
	cmd.Dir = dir
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "E2B_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(append(cmd.Env, "E2B_TEST_RUN="+strconv.FormatInt(time.Now().UnixNano(), 36)), vars...)
	file := args[len(args)-1]
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", file, out)
	if err != nil {
		t.Fatalf("%s failed: %v", file, err)
	}
}

// TestE2BDomain runs integration/e2b/hosts.test.mjs: the SDKs configured
// with E2B_DOMAIN alone reach the control plane at api.<domain> and each
// sandbox at <port>-<id>.<domain> over TLS (envd, the code interpreter,
// getHost(port) previews, signed upload and download URLs). The daemon's
// preview domain is the domain; a TLS front with a test CA stands for the
// daemon's TLS, and loopback.mjs for a wildcard DNS record.
func TestE2BDomain(t *testing.T) {
	needBase(t)
	needPython(t)
	addr, caFile := tlsToSocket(t)
	_, port, _ := net.SplitHostPort(addr)
	domain := env.cfg.PreviewDomain()
	runNodeTests(t, []string{"--import", "./loopback.mjs", "hosts.test.mjs"}, []string{
		"E2B_DOMAIN=" + domain + ":" + port,
		"E2B_API_KEY=" + env.key,
		"E2B_TEST_RESOLVE=" + domain,
		"NODE_EXTRA_CA_CERTS=" + caFile,
	})
}

// tlsToSocket serves TLS on a loopback port and passes what it decrypts
// to the daemon's socket, as the daemon's own TLS listener would serve
// it. Its certificates are made per server name, signed by a test CA,
// whose PEM file it returns with the address.
func tlsToSocket(t *testing.T) (addr, caFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	caTpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentbox e2b test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTpl, caTpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	caFile = filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	certs := map[string]*tls.Certificate{}
	var serial int64 = 1
	conf := &tls.Config{NextProtos: []string{"http/1.1"}, GetCertificate: func(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		if c := certs[hello.ServerName]; c != nil {
			return c, nil
		}
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		serial++
		tpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: hello.ServerName},
			NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{hello.ServerName},
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
		der, err := x509.CreateCertificate(rand.Reader, tpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		c := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
		certs[hello.ServerName] = c
		return c, nil
	}}
	ln := serveTCP(t, "tcp4", "127.0.0.1:0", func(raw net.Conn) {
		go func() {
			c := tls.Server(raw, conf)
			defer c.Close()
			u, err := net.Dial("unix", env.cfg.Socket)
			if err != nil {
				return
			}
			defer u.Close()
			go func() { _, _ = io.Copy(u, c); u.(*net.UnixConn).CloseWrite() }()
			_, _ = io.Copy(c, u)
		}()
	})
	return ln.Addr().String(), caFile
}

// TestE2BSDK runs the unmodified e2b SDK (integration/e2b/sdk.test.mjs):
// the control plane, commands, background commands, files and watch.
func TestE2BSDK(t *testing.T) {
	needBase(t)
	runE2BTests(t, "sdk.test.mjs")
}

// TestE2BSDKGvisor runs the same scenarios on the gvisor tier: the
// templateID base@gvisor names the tier (docs/e2b.md).
func TestE2BSDKGvisor(t *testing.T) {
	needBase(t)
	needGvisor(t)
	runE2BTests(t, "sdk.test.mjs", "E2B_TEST_TEMPLATE=base@gvisor")
}

// TestE2BCodeInterpreter runs the unmodified @e2b/code-interpreter SDK
// (integration/e2b/interpreter.test.mjs) on its default template.
func TestE2BCodeInterpreter(t *testing.T) {
	needPython(t)
	runE2BTests(t, "interpreter.test.mjs")
}

// TestE2BCodeInterpreterGvisor runs the same on the gvisor tier: the
// templateID code-interpreter-v1@gvisor is the default template's alias
// with a tier (docs/e2b.md).
func TestE2BCodeInterpreterGvisor(t *testing.T) {
	needPython(t)
	needGvisor(t)
	runE2BTests(t, "interpreter.test.mjs", "E2B_TEST_TEMPLATE=code-interpreter-v1@gvisor")
}

// TestE2BQuickstarts runs E2B's quickstarts (integration/e2b/quickstart:
// the e2b SDK's first sandbox and @e2b/code-interpreter's first runCode)
// as user scripts, each its own Node process, with only the E2B variables
// set.
func TestE2BQuickstarts(t *testing.T) {
	needBase(t)
	needPython(t)
	runE2BTests(t, "quickstart.test.mjs")
}

// e2bCall makes one raw E2B request to the test daemon and decodes a JSON
// answer into out (when not nil); it returns the status and the body.
func e2bCall(t *testing.T, addr, method, path string, header map[string]string, body string, out any) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+addr+"/e2b"+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if out != nil && resp.StatusCode < 300 {
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s %s: %v in %s", method, path, err, b)
		}
	}
	return resp.StatusCode, string(b)
}

// TestE2BWire checks on the wire what the JS SDK does not exercise: the
// v1 routes older SDKs (and E2B's Python SDK) use, with the status codes
// and required fields the Python SDK insists on; E2B's error shapes; and
// that an E2B call has its key's rights, no more.
func TestE2BWire(t *testing.T) {
	needBase(t)
	addr := loopbackToSocket(t)
	admin := map[string]string{"X-API-KEY": env.key}

	// v1 create, as E2B's Python SDK sends it.
	var sb map[string]any
	status, body := e2bCall(t, addr, "POST", "/sandboxes", admin,
		`{"templateID":"base","timeout":300,"metadata":{"via":"v1"},"envVars":{},"secure":true,"allow_internet_access":true}`, &sb)
	if status != http.StatusCreated {
		t.Fatalf("POST /sandboxes: %d %s", status, body)
	}
	id, _ := sb["sandboxID"].(string)
	t.Cleanup(func() { _ = env.client.DestroySandbox(context.Background(), id) })
	for _, f := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "envdAccessToken"} {
		if s, _ := sb[f].(string); s == "" {
			t.Errorf("create answered no %s: %s", f, body)
		}
	}
	var detail map[string]any
	if status, body := e2bCall(t, addr, "GET", "/sandboxes/"+id, admin, "", &detail); status != http.StatusOK {
		t.Fatalf("GET /sandboxes/%s: %d %s", id, status, body)
	}
	for _, f := range []string{"sandboxID", "templateID", "clientID", "envdVersion", "startedAt", "endAt", "state", "cpuCount", "memoryMB", "diskSizeMB"} {
		if _, ok := detail[f]; !ok {
			t.Errorf("info has no %s: %v", f, detail)
		}
	}
	if status, body := e2bCall(t, addr, "POST", "/sandboxes/"+id+"/connect", admin, `{"timeout":300}`, nil); status != http.StatusOK {
		t.Errorf("v1 connect of a running sandbox: %d %s", status, body)
	}
	var listed []map[string]any
	e2bCall(t, addr, "GET", "/sandboxes?metadata="+url.QueryEscape("via=v1"), admin, "", &listed)
	if len(listed) != 1 || listed[0]["sandboxID"] != id {
		t.Errorf("v1 list by metadata: %v", listed)
	}

	// A key of another tenant sees nothing of it, on either plane: its
	// sandbox answers as one that does not exist (404; envd: not running,
	// 502 or unavailable, as E2B's proxy answers for an unknown sandbox).
	_, _, other := tenantKey(t, "e2b", nil)
	for _, target := range []string{id, "nosuchsandbox"} {
		if status, body := e2bCall(t, addr, "GET", "/sandboxes/"+target, map[string]string{"X-API-KEY": other.Secret}, "", nil); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
			t.Errorf("another tenant's getInfo of %s: %d %s", target, status, body)
		}
		envd := map[string]string{"X-Access-Token": other.Secret, "E2b-Sandbox-Id": target, "E2b-Sandbox-Port": "49983"}
		if status, body := e2bCall(t, addr, "POST", "/filesystem.Filesystem/Stat", envd, `{"path":"/etc/hostname"}`, nil); status != http.StatusServiceUnavailable || !strings.Contains(body, `"code":"unavailable"`) {
			t.Errorf("another tenant's Stat in %s: %d %s", target, status, body)
		}
		if status, body := e2bCall(t, addr, "GET", "/files?path=/etc/hostname", envd, "", nil); status != http.StatusBadGateway {
			t.Errorf("another tenant's file read in %s: %d %s", target, status, body)
		}
	}
	// The owner's missing file is the file's not_found, not the sandbox's.
	own := map[string]string{"X-Access-Token": env.key, "E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
	if status, body := e2bCall(t, addr, "POST", "/filesystem.Filesystem/Stat", own, `{"path":"/nonexistent"}`, nil); status != http.StatusNotFound || !strings.Contains(body, `"code":"not_found"`) {
		t.Errorf("Stat of a missing file: %d %s", status, body)
	}
	if status, body := e2bCall(t, addr, "GET", "/files?path=/nonexistent", own, "", nil); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("read of a missing file: %d %s", status, body)
	}
	envd := map[string]string{"X-Access-Token": other.Secret, "E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}

	// No key, a wrong key: 401 in each plane's shape.
	if status, body := e2bCall(t, addr, "GET", "/v2/sandboxes", nil, "", nil); status != http.StatusUnauthorized || !strings.Contains(body, `"code":401`) {
		t.Errorf("no key: %d %s", status, body)
	}
	envd["X-Access-Token"] = "ab_wrong"
	if status, body := e2bCall(t, addr, "POST", "/process.Process/List", envd, `{}`, nil); status != http.StatusUnauthorized || !strings.Contains(body, `"code":"unauthenticated"`) {
		t.Errorf("wrong envd token: %d %s", status, body)
	}

	// Kill: 204, then 404 with E2B's body; a gone sandbox's health is 502.
	if status, body := e2bCall(t, addr, "DELETE", "/sandboxes/"+id, admin, "", nil); status != http.StatusNoContent {
		t.Errorf("kill: %d %s", status, body)
	}
	if status, body := e2bCall(t, addr, "DELETE", "/sandboxes/"+id, admin, "", nil); status != http.StatusNotFound || !strings.Contains(body, `"code":404`) {
		t.Errorf("second kill: %d %s", status, body)
	}
	envd = map[string]string{"X-Access-Token": env.key, "E2b-Sandbox-Id": id, "E2b-Sandbox-Port": "49983"}
	if status, body := e2bCall(t, addr, "GET", "/health", envd, "", nil); status != http.StatusBadGateway {
		t.Errorf("health of a killed sandbox: %d %s", status, body)
	}
}
