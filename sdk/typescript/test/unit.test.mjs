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
