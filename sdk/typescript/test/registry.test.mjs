// Templates and snapshots through a real OCI registry (Client.pushTemplate,
// pullTemplate, pushSnapshot, pullSnapshot, removeTemplate) and the fleet
// calls, against the daemon of AGENTBOX_HOST. The registry is
// AGENTBOX_TEST_REGISTRY (HOST:PORT; integration/typescript_sdk_test.go
// sets it from its startRegistry), or one started here from Debian's
// docker-registry on loopback.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { randomBytes } from "node:crypto";
import { Client, Sandbox, NotSupportedError } from "agentbox";

const TEMPLATE = process.env.AGENTBOX_TEST_REGISTRY_TEMPLATE || "busybox";
let registry = process.env.AGENTBOX_TEST_REGISTRY;
let proc;
let dir;

before(async () => {
  if (registry) return;
  const bin = "/usr/bin/docker-registry";
  assert.ok(existsSync(bin), "docker-registry is missing: run scripts/install-test-deps.sh");
  const port = await new Promise((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => resolve(p));
    });
  });
  registry = `127.0.0.1:${port}`;
  dir = mkdtempSync(join(tmpdir(), "agentbox-ts-registry-"));
  const cfg = join(dir, "config.yml");
  writeFileSync(
    cfg,
    `version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: ${join(dir, "data")}\nhttp:\n  addr: ${registry}\n`,
  );
  proc = spawn(bin, ["serve", cfg], { stdio: "ignore" });
  const deadline = Date.now() + 30_000;
  for (;;) {
    try {
      if ((await fetch(`http://${registry}/v2/`)).status === 200) break;
    } catch {}
    assert.ok(proc.exitCode === null && Date.now() < deadline, `docker-registry did not start on ${registry}`);
    await new Promise((r) => setTimeout(r, 50));
  }
});

after(() => {
  proc?.kill("SIGKILL");
  if (dir) rmSync(dir, { recursive: true, force: true });
});

test("a template pushed to a registry and pulled back under another name", async () => {
  const tag = randomBytes(3).toString("hex");
  const ref = `${registry}/agentbox/sdk-ts/${TEMPLATE}:${tag}`;
  const name = `sdkreg-ts-${tag}`;
  const c = new Client();
  const pushed = await c.pushTemplate(TEMPLATE, ref);
  assert.equal(pushed.ref, ref);
  assert.match(pushed.digest, /^sha256:/);
  assert.equal((await c.pushTemplate(TEMPLATE, ref)).digest, pushed.digest);
  const tpl = await c.pullTemplate(`${registry}/agentbox/sdk-ts/${TEMPLATE}@${pushed.digest}`, { name });
  try {
    assert.equal(tpl.name, name);
    const sbx = await Sandbox.create({ template: name, ttlSeconds: 120, metadata: { suite: "ts-sdk" } });
    try {
      assert.equal((await sbx.exec("busybox echo pulled")).stdout, "pulled\n");
    } finally {
      await sbx.destroy();
    }
  } finally {
    await c.removeTemplate(name);
  }
  assert.ok(!(await c.templates()).some((t) => t.name === name));
});

test("a snapshot pushed to a registry and pulled back", async () => {
  const tag = randomBytes(3).toString("hex");
  const ref = `${registry}/agentbox/sdk-ts/snap:${tag}`;
  const c = new Client();
  const sbx = await Sandbox.create({ template: TEMPLATE, ttlSeconds: 120, metadata: { suite: "ts-sdk" } });
  let snap;
  try {
    await sbx.exec("echo travelled > /root/f");
    snap = await sbx.snapshot();
  } finally {
    await sbx.destroy();
  }
  assert.match((await c.pushSnapshot(snap.id, ref)).digest, /^sha256:/);
  const pulled = await c.pullSnapshot(ref, { name: `sdkreg-ts-${tag}` });
  assert.notEqual(pulled.id, snap.id);
  assert.equal(pulled.name, `sdkreg-ts-${tag}`);
  const child = await Sandbox.create({ snapshot: pulled.id, ttlSeconds: 120, metadata: { suite: "ts-sdk" } });
  try {
    assert.equal((await child.exec("cat /root/f")).stdout, "travelled\n");
  } finally {
    await child.destroy();
  }
});

test("node status; a daemon that is not a gateway has no fleet table", async () => {
  const c = new Client();
  const st = await c.nodeStatus();
  assert.ok(st.version && st.cpus > 0 && st.memoryTotalMb > 0, JSON.stringify(st));
  assert.ok(st.tiers.some((t) => t.name === "container"));
  assert.ok(st.templates.includes(TEMPLATE), JSON.stringify(st.templates));
  await assert.rejects(c.fleetNodes(), NotSupportedError);
});
