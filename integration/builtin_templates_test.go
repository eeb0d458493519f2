package integration

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentbox/agentbox/api"
)

// The start-up tests of the built-in templates of scripts/build-template.sh:
// each one is created with the defaults a user gets and runs what its
// description promises (docs/templates.md, "Built-in templates").
func TestBuiltinTemplates(t *testing.T) {
	t.Run("base", func(t *testing.T) {
		needBase(t)
		id := newSandbox(t, api.CreateSandboxRequest{Template: "base"})
		checks := []struct{ script, want string }{
			{`bash -c 'echo "bash $BASH_VERSINFO"'`, "bash 5"},
			{`python3 -c 'import sys, json; print(json.dumps({"py": sys.version_info[0], "sum": sum(range(101))}))'`, `{"py": 3, "sum": 5050}`},
			{`pip --version`, "python 3"},
			{`python3 -m venv --without-pip /tmp/venv && /tmp/venv/bin/python -c 'import sys; print(sys.prefix)'`, "/tmp/venv"},
			{`node --version`, "v"},
			{`npm --version`, "."},
			{`cd /tmp && git init -q r && cd r && git -c user.name=t -c user.email=t@example.com commit -q --allow-empty -m first && git log --format=%s`, "first"},
			{`curl --version`, "curl "},
			{`id user`, "uid=1000(user) gid=1000(user)"},
			{`getent passwd user | cut -d: -f6,7`, "/home/user:/bin/bash"},
		}
		for _, c := range checks {
			if out := mustSh(t, id, c.script); !strings.Contains(out, c.want) {
				t.Errorf("%s: got %q, want it to contain %q", c.script, out, c.want)
			}
		}
		// The user account works as a user: its home is its own.
		res := execReq(t, id, api.ExecRequest{Shell: "cd && touch mine && stat -c '%U %a' mine && whoami", User: "user"})
		if res.ExitCode != 0 || strings.TrimSpace(res.Stdout) != "user 644\nuser" {
			t.Errorf("as user: exit %d, stdout %q, stderr %q; want \"user 644\\nuser\"", res.ExitCode, res.Stdout, res.Stderr)
		}
	})

	t.Run("python", func(t *testing.T) {
		if !env.hasPython {
			t.Fatal("the python template is missing: run scripts/build-template.sh python --no-import (scripts/test.sh does)")
		}
		id := newSandbox(t, api.CreateSandboxRequest{Template: "python"})
		script := `python3 - <<'EOF'
import numpy as np, pandas as pd, requests, ipykernel
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
a = np.arange(1, 11)
df = pd.DataFrame({"k": ["x", "y"] * 5, "v": a})
fig, ax = plt.subplots()
df.groupby("k")["v"].sum().plot.bar(ax=ax)
fig.savefig("/tmp/p.png")
print("dot", int(a @ a))
print("groups", df.groupby("k")["v"].sum().to_dict())
print("png", open("/tmp/p.png", "rb").read(4)[1:4].decode())
print("requests", requests.__version__.split(".")[0], "ipykernel", ipykernel.__version__.split(".")[0])
EOF`
		out := mustSh(t, id, script)
		for _, want := range []string{"dot 385", "groups {'x': 25, 'y': 30}", "png PNG", "requests 2"} {
			if !strings.Contains(out, want) {
				t.Errorf("output lacks %q:\n%s", want, out)
			}
		}
		// ipykernel gives Jupyter clients a python kernel spec.
		if out := mustSh(t, id, `python3 -c 'from ipykernel.kernelspec import get_kernel_dict; print(get_kernel_dict()["language"])'`); out != "python" {
			t.Errorf("ipykernel's kernel spec language: got %q, want python", out)
		}
	})

	t.Run("node", func(t *testing.T) {
		importNode(t)
		id := newSandbox(t, api.CreateSandboxRequest{Template: "node"})
		if out := mustSh(t, id, `node -e 'console.log([1, 2, 3].map(x => x * x).reduce((a, b) => a + b))'`); out != "14" {
			t.Errorf("node -e: got %q, want 14", out)
		}
		if out := mustSh(t, id, `npm --version`); !strings.Contains(out, ".") {
			t.Errorf("npm --version: got %q", out)
		}
		// tsc type-checks and compiles; node runs the output. One tsc run
		// (a few seconds on a loaded machine) takes a good file and one
		// with a type error: it must report exactly that error, fail, and
		// still emit the good file.
		script := `mkdir -p /tmp/ts && cd /tmp/ts && cat >main.ts <<'EOF'
interface Point { x: number; y: number }
const norm2 = (p: Point): number => p.x * p.x + p.y * p.y;
console.log("norm2", norm2({ x: 3, y: 4 }));
EOF
echo 'const s: string = 42;' >bad.ts
tsc --version
tsc --strict --target es2020 main.ts bad.ts
echo "tsc exit $?"
node main.js`
		out := mustSh(t, id, script)
		for _, want := range []string{"Version ", "bad.ts(1,7): error TS2322", "tsc exit 2", "norm2 25"} {
			if !strings.Contains(out, want) {
				t.Errorf("tsc + node: output lacks %q:\n%s", want, out)
			}
		}
		if strings.Contains(out, "main.ts(") {
			t.Errorf("tsc reports an error in main.ts, which is correct TypeScript:\n%s", out)
		}
	})
}

var nodeImport struct {
	once sync.Once
	err  error
}

// importNode imports the node template from the build cache of
// scripts/build-template.sh (scripts/test.sh builds it with --no-import)
// the first time a test needs it: only this test uses it, so the other
// runs of the package do not pay for copying its rootfs.
func importNode(t testing.TB) {
	t.Helper()
	nodeImport.once.Do(func() {
		dir := filepath.Join("/var/lib/agentbox/build", "node")
		if _, err := os.Stat(filepath.Join(dir, "usr/bin/tsc")); err != nil {
			nodeImport.err = fmt.Errorf("the node template is missing from the build cache (%v): run scripts/build-template.sh node --no-import (scripts/test.sh does)", err)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		_, err := env.client.ImportTemplate(ctx, api.ImportTemplateRequest{Name: "node", Rootfs: dir, User: "root", Workdir: "/root",
			Env: builtinTemplateEnv()})
		if err != nil {
			nodeImport.err = fmt.Errorf("importing node from %s: %w", dir, err)
			return
		}
		t.Logf("imported the node template from %s in %v", dir, time.Since(start).Round(time.Millisecond))
	})
	if nodeImport.err != nil {
		t.Fatal(nodeImport.err)
	}
}
