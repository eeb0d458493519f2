// Unit tests that need no daemon: host parsing, error classes, the tar
// writer and reader, and the CommonJS build's exports.
import { test } from "node:test";
import assert from "node:assert/strict";
import { createRequire } from "node:module";
import { mkdtempSync, mkdirSync, writeFileSync, readFileSync, symlinkSync, readlinkSync, statSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import * as sdk from "agentbox";
import { packDir, extract } from "../dist/esm/tar.js";

test("parseHost", () => {
  assert.deepEqual(sdk.parseHost("unix:///run/a.sock"), { baseUrl: "http://agentbox", socket: "/run/a.sock" });
  assert.deepEqual(sdk.parseHost("127.0.0.1:7423"), { baseUrl: "http://127.0.0.1:7423" });
  assert.deepEqual(sdk.parseHost("tcp://h:1/"), { baseUrl: "http://h:1" });
  assert.throws(() => sdk.parseHost("unix://rel"), sdk.InvalidArgumentError);
  assert.throws(() => sdk.parseHost("ftp://h"), sdk.InvalidArgumentError);
});

test("an empty AGENTBOX_API_KEY is refused", () => {
  const old = process.env.AGENTBOX_API_KEY;
  process.env.AGENTBOX_API_KEY = " ";
  try {
    assert.throws(() => sdk.resolveConfig({ baseUrl: "http://127.0.0.1:1" }), sdk.InvalidArgumentError);
  } finally {
    if (old === undefined) delete process.env.AGENTBOX_API_KEY;
    else process.env.AGENTBOX_API_KEY = old;
  }
});

test("errors by code", () => {
  const table = {
    not_found: sdk.NotFoundError,
    invalid_argument: sdk.InvalidArgumentError,
    unauthenticated: sdk.UnauthorizedError,
    permission_denied: sdk.PermissionDeniedError,
    deadline_exceeded: sdk.TimeoutError,
    failed_precondition: sdk.ConflictError,
    already_exists: sdk.ConflictError,
    resource_exhausted: sdk.ResourceExhaustedError,
    unavailable: sdk.UnavailableError,
    internal: sdk.InternalError,
    unimplemented: sdk.NotSupportedError,
    something_new: sdk.InternalError,
  };
  for (const [code, cls] of Object.entries(table)) {
    const e = sdk.errorFromCode(code, "msg", 400);
    assert.ok(e instanceof cls && e instanceof sdk.AgentboxError && e instanceof Error, code);
    assert.equal(e.code, code);
    assert.equal(e.status, 400);
    assert.equal(e.name, cls.name);
  }
  assert.equal(new sdk.NotFoundError("x").code, "not_found");
  assert.ok(sdk.errorFromStatus(404, "x") instanceof sdk.NotFoundError);
});

test("a tree survives packDir and extract", async () => {
  const d = mkdtempSync(join(tmpdir(), "agentbox-tar-"));
  try {
    const src = join(d, "src");
    const long = "d".repeat(60) + "/" + "f".repeat(70) + ".txt";
    mkdirSync(join(src, "d".repeat(60)), { recursive: true });
    mkdirSync(join(src, "empty"));
    writeFileSync(join(src, long), "long name");
    writeFileSync(join(src, "big.bin"), Buffer.alloc(700_000, 7), { mode: 0o750 });
    writeFileSync(join(src, "zero"), "");
    symlinkSync("big.bin", join(src, "link"));
    await extract(packDir(src), join(d, "out"));
    const out = join(d, "out");
    assert.equal(readFileSync(join(out, long), "utf8"), "long name");
    assert.deepEqual(readFileSync(join(out, "big.bin")), Buffer.alloc(700_000, 7));
    assert.equal(statSync(join(out, "big.bin")).mode & 0o777, 0o750);
    assert.equal(readFileSync(join(out, "zero"), "utf8"), "");
    assert.ok(statSync(join(out, "empty")).isDirectory());
    assert.equal(readlinkSync(join(out, "link")), "big.bin");
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test("extract refuses entries outside the tree", async () => {
  const d = mkdtempSync(join(tmpdir(), "agentbox-tar-"));
  try {
    // A link to outside, then a file through it: the file must not land there.
    mkdirSync(join(d, "src"));
    symlinkSync(d, join(d, "src", "esc"));
    async function* evil() {
      for await (const c of packDir(join(d, "src"))) {
        if (c.length === 1024 && c.every((b) => b === 0)) break;
        yield c;
      }
      const h = Buffer.alloc(512);
      h.write("esc/pwned", 0);
      h.write("0000644\0", 100);
      h.write("00000000001\0", 124);
      h.write("        ", 148);
      h.write("0", 156);
      h.write("ustar\x0000", 257);
      let sum = 0;
      for (const b of h) sum += b;
      h.write(sum.toString(8).padStart(6, "0") + "\0 ", 148);
      yield h;
      yield Buffer.concat([Buffer.from("x"), Buffer.alloc(511), Buffer.alloc(1024)]);
    }
    await assert.rejects(extract(evil(), join(d, "out")), sdk.InvalidArgumentError);
    assert.throws(() => statSync(join(d, "pwned")));
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
});

test("the CommonJS build exports what the ES module does", () => {
  const require = createRequire(import.meta.url);
  const cjs = require("agentbox");
  assert.deepEqual(Object.keys(cjs).sort(), Object.keys(sdk).sort());
  assert.equal(typeof cjs.Sandbox.create, "function");
  assert.ok(new cjs.NotFoundError("x") instanceof cjs.AgentboxError);
});

test("registry and fleet calls: paths, bodies, answers", async () => {
  const { createServer } = await import("node:http");
  const seen = [];
  const answers = {
    "POST /v1/templates/my%20app/push": { ref: "h/r:1", digest: "sha256:ab" },
    "POST /v1/templates/pull": { name: "x", version: "2" },
    "POST /v1/snapshots/s%2F1/push": { ref: "h/s:1", digest: "sha256:cd" },
    "POST /v1/snapshots/pull": { id: "n2aabcdefghijkl", name: "s1" },
    "GET /v1/fleet/nodes": {
      nodes: [
        {
          id: "n2a",
          url: "http://192.0.2.11:7423",
          available: true,
          in_flight: 2,
          last_poll: "2026-01-02T03:04:05.123456789Z",
          status: { node_id: "n2a", tiers: [{ name: "container", available: true, default: true }], sandboxes: 3, cpus: 2, load1: 0.5, memory_available_mb: 20000, templates: ["base"] },
        },
        { id: "n3b", url: "http://192.0.2.12:7423", last_error: "connection refused" },
      ],
    },
    "GET /v1/node": { node_id: "n2a", version: "v1", cpus: 2, memory_total_mb: 24000 },
  };
  const srv = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      const key = `${req.method} ${req.url}`;
      seen.push([key, body ? JSON.parse(body) : undefined]);
      if (req.method === "DELETE") return res.writeHead(204).end();
      res.writeHead(200, { "Content-Type": "application/json" }).end(JSON.stringify(answers[key] ?? {}));
    });
  });
  await new Promise((r) => srv.listen(0, "127.0.0.1", r));
  try {
    const c = new sdk.Client({ baseUrl: `http://127.0.0.1:${srv.address().port}`, apiKey: "k" });
    assert.deepEqual(await c.pushTemplate("my app", "h/r:1"), { ref: "h/r:1", digest: "sha256:ab" });
    assert.equal((await c.pullTemplate("h/r:1", { name: "x" })).version, "2");
    await c.pullTemplate("h/r:1");
    assert.equal((await c.pushSnapshot("s/1", "h/s:1")).digest, "sha256:cd");
    const snap = await c.pullSnapshot("h/s:1", { name: "s1" });
    assert.equal(snap.id, "n2aabcdefghijkl");
    await c.removeTemplate("x");
    const [a, b] = await c.fleetNodes();
    assert.ok(a.available && a.inFlight === 2 && a.lastPoll?.getUTCFullYear() === 2026);
    assert.deepEqual(a.status?.tiers, [{ name: "container", available: true, default: true, error: "" }]);
    assert.equal(a.status?.memoryAvailableMb, 20000);
    assert.ok(!b.available && b.status === undefined && b.lastError === "connection refused");
    const st = await c.nodeStatus();
    assert.deepEqual([st.nodeId, st.cpus, st.memoryTotalMb, st.templates], ["n2a", 2, 24000, []]);
    assert.deepEqual(seen, [
      ["POST /v1/templates/my%20app/push", { ref: "h/r:1" }],
      ["POST /v1/templates/pull", { ref: "h/r:1", name: "x" }],
      ["POST /v1/templates/pull", { ref: "h/r:1" }],
      ["POST /v1/snapshots/s%2F1/push", { ref: "h/s:1" }],
      ["POST /v1/snapshots/pull", { ref: "h/s:1", name: "s1" }],
      ["DELETE /v1/templates/x", undefined],
      ["GET /v1/fleet/nodes", undefined],
      ["GET /v1/node", undefined],
    ]);
    for (const bad of [() => c.pushTemplate("", "h/r"), () => c.pushTemplate("t", ""), () => c.pullTemplate(""),
      () => c.pushSnapshot("", "h/r"), () => c.pullSnapshot(""), () => c.removeTemplate("")]) {
      await assert.rejects(bad(), sdk.InvalidArgumentError);
    }
    assert.equal(seen.length, 8, "nothing sent for refused arguments");
  } finally {
    srv.close();
  }
});
