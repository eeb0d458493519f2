package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// TestTypeScriptSDK installs sdk/typescript's pinned build tools (npm ci
// with its committed package-lock.json), builds the package (the ES module
// and CommonJS builds with their types) and runs its Node test suite
// against this package's daemon: unit tests, the type declarations
// compiled, AbortSignal, the terminal, the Client, templates and snapshots
// pushed to and pulled from a real registry (startRegistry) and the shared
// behaviour suite (sdk/testdata/behaviour).
func TestTypeScriptSDK(t *testing.T) {
	needBase(t)
	dir := filepath.Join(env.repo, "sdk", "typescript")
	if err := buildTypeScriptSDK(dir); err != nil {
		t.Fatal(err)
	}
	// The SDK has no call to remove a snapshot: the behaviour suite's are
	// removed here, as for the Python SDK.
	snapsBefore, err := env.client.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeSnapshotsSince(t, snapsBefore) })
	// test/registry.test.mjs pushes and pulls through a real registry.
	reg := startRegistry(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "node", "--test", "--test-concurrency=1", "--test-reporter=spec", "test/")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"AGENTBOX_HOST=unix://"+env.cfg.Socket,
		"AGENTBOX_API_KEY="+env.key,
		"AGENTBOX_TEST_REGISTRY="+reg,
	)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	t.Logf("node --test (%s):\n%s", time.Since(start).Round(time.Millisecond), out)
	if err != nil {
		t.Fatalf("the TypeScript SDK's tests failed: %v", err)
	}
}

// buildTypeScriptSDK runs npm ci and npm run build in dir, installing
// Node.js and npm first where they are missing.
func buildTypeScriptSDK(dir string) error {
	for _, bin := range []string{"node", "npm"} {
		if _, err := exec.LookPath(bin); err != nil {
			cmd := exec.Command(filepath.Join(env.repo, "scripts", "install-test-deps.sh"))
			if out, err := cmd.CombinedOutput(); err != nil {
				return fmt.Errorf("installing Node.js and npm (scripts/install-test-deps.sh): %v\n%s", err, out)
			}
			break
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"ci", "--no-audit", "--no-fund"}, {"run", "build"}} {
		cmd := exec.CommandContext(ctx, "npm", args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("npm %s in sdk/typescript: %v\n%s", args[0], err, out)
		}
	}
	return nil
}
