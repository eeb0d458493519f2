package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
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
	dir := e2bSDKDir(t)
	addr := loopbackToSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-concurrency=1", "--test-reporter=spec", file)
	cmd.Dir = dir
	cmd.Env = append(append(os.Environ(),
		"E2B_API_URL=http://"+addr+"/e2b",
		"E2B_SANDBOX_URL=http://"+addr+"/e2b",
		"E2B_API_KEY="+env.key,
		"E2B_TEST_RUN="+strconv.FormatInt(time.Now().UnixNano(), 36),
	), extraEnv...)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", file, out)
	if err != nil {
		t.Fatalf("%s failed: %v", file, err)
	}
}

// TestE2BSDK runs the unmodified e2b SDK (integration/e2b/sdk.test.mjs):
// the control plane, commands, background commands, files and watch.
func TestE2BSDK(t *testing.T) {
	needBase(t)
	runE2BTests(t, "sdk.test.mjs")
}

// TestE2BCodeInterpreter runs the unmodified @e2b/code-interpreter SDK
// (integration/e2b/interpreter.test.mjs) on its default template.
func TestE2BCodeInterpreter(t *testing.T) {
	needPython(t)
	runE2BTests(t, "interpreter.test.mjs")
}
