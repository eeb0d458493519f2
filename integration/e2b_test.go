package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// e2bSDKDir installs the pinned e2b SDKs of integration/e2b (package.json
// and its committed package-lock.json) with npm ci, installing Node.js and
// npm first where they are missing, and returns the directory.
func e2bSDKDir(t *testing.T) string {
	t.Helper()
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			cmd := exec.Command(filepath.Join(env.repo, "scripts", "install-test-deps.sh"))
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("installing Node.js and npm (scripts/install-test-deps.sh): %v\n%s", err, out)
			}
			break
		}
	}
	dir, err := filepath.Abs("e2b")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in integration/e2b: %v\n%s", err, out)
	}
	return dir
}

// TestE2BSDK runs the unmodified e2b SDK (integration/e2b/*.test.mjs,
// Node's test runner) against the test daemon's E2B API, with only the
// variables docs/e2b.md tells users to set.
func TestE2BSDK(t *testing.T) {
	needBase(t)
	dir := e2bSDKDir(t)
	addr := loopbackToSocket(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-concurrency=1", "--test-reporter=spec")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"E2B_API_URL=http://"+addr+"/e2b",
		"E2B_SANDBOX_URL=http://"+addr+"/e2b",
		"E2B_API_KEY="+env.key,
		"E2B_TEST_RUN="+strconv.FormatInt(time.Now().UnixNano(), 36),
	)
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("the e2b SDK tests failed: %v", err)
	}
}
