// The TypeScript runner of the shared behaviour suite
// (sdk/testdata/behaviour/README.md), against the daemon named by
// AGENTBOX_HOST and AGENTBOX_API_KEY; run by integration/typescript_sdk_test.go.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, readdirSync, mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname, relative } from "node:path";
import { Sandbox, AgentboxError, errorFromCode } from "agentbox";

const dir = new URL("../../testdata/behaviour/", import.meta.url);
const cases = readdirSync(dir)
  .filter((f) => f.endsWith(".json"))
  .sort()
  .flatMap((f) => JSON.parse(readFileSync(new URL(f, dir), "utf8")));

const blob = (v) => (typeof v === "object" ? Buffer.from(v.b64, "base64") : Buffer.from(v));

function readTree(root) {
  const out = {};
  const walk = (d) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else out[relative(root, p)] = readFileSync(p);
    }
  };
  walk(root);
  return out;
}

function check(step, key, got, want) {
  const { expect, ...args } = step;
  assert.deepEqual(got, want, `step ${step.op} ${JSON.stringify(args)}: ${key}`);
}

async function ptyStep(sbx, step, exp) {
  const t = await sbx.pty({ cmd: step.cmd });
  try {
    if ("text" in step) await t.write(step.text);
    const limit = step.timeout_s ?? 60;
    const deadline = Date.now() + limit * 1000;
    let out = Buffer.alloc(0);
    for (;;) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) assert.fail(`the terminal's program did not exit within ${limit} s; got ${out.subarray(-300)}`);
      const c = await t.read({ timeout: left });
      if (c.length === 0) break;
      out = Buffer.concat([out, c]);
    }
    assert.notEqual(t.exitCode, undefined, `the terminal ended without an exit code; output ${out.subarray(-300)}`);
    if ("stdout_contains" in exp) {
      assert.ok(out.includes(exp.stdout_contains), `terminal output ${out.subarray(-300)} lacks ${exp.stdout_contains}`);
    }
    if ("exit_code" in exp) check(step, "exit_code", t.exitCode, exp.exit_code);
  } finally {
    await t.close();
  }
}

async function runStep(sbx, step, created, snaps) {
  const exp = step.expect ?? {};
  switch (step.op) {
    case "exec": {
      const o = {};
      for (const k of ["env", "cwd", "user", "stdin"]) if (k in step) o[k] = step[k];
      if ("timeout_s" in step) o.timeout = step.timeout_s;
      let r;
      if (step.stream) {
        // Both ways of streaming: execStream's events, and callbacks.
        let streamed = "";
        const it = sbx.execStream(step.cmd, o);
        for await (const ev of it) {
          if (ev.type === "stdout") streamed += ev.text;
          if (ev.type === "exit") r = ev.result;
        }
        check(step, "streamed stdout", streamed, r.stdout);
        const parts = [];
        const r2 = await sbx.exec(step.cmd, { ...o, onStdout: (s) => parts.push(s), onStderr: () => {} });
        check(step, "callback stdout", parts.join(""), r2.stdout);
        check(step, "second run's exit code", r2.exitCode, r.exitCode);
      } else {
        r = await sbx.exec(step.cmd, o);
      }
      const got = { stdout: r.stdout, stderr: r.stderr, exit_code: r.exitCode, timed_out: r.timedOut, signal: r.signal };
      for (const k of Object.keys(got)) if (k in exp) check(step, k, got[k], exp[k]);
      if ("stdout_contains" in exp) assert.ok(r.stdout.includes(exp.stdout_contains), `stdout ${r.stdout.slice(-300)} lacks ${exp.stdout_contains}`);
      return;
    }
    case "write": {
      const data = "b64" in step ? Buffer.from(step.b64, "base64") : step.text;
      const info = await sbx.files.write(step.path, data, step.mode ? { mode: step.mode } : {});
      for (const k of ["size", "mode"]) if (k in exp) check(step, k, info[k], exp[k]);
      return;
    }
    case "read": {
      const b = await sbx.files.read(step.path);
      if ("text" in exp) check(step, "text", b.toString("utf8"), exp.text);
      if ("b64" in exp) check(step, "bytes", b, Buffer.from(exp.b64, "base64"));
      return;
    }
    case "stat": {
      const info = await sbx.files.stat(step.path);
      for (const k of ["type", "size", "mode"]) if (k in exp) check(step, k, info[k], exp[k]);
      return;
    }
    case "exists":
      check(step, "exists", await sbx.files.exists(step.path), exp.value);
      return;
    case "list": {
      const entries = await sbx.files.list(step.path, { depth: step.depth ?? 1 });
      if ("paths" in exp) check(step, "paths", entries.map((e) => e.path).sort(), exp.paths);
      return;
    }
    case "mkdir": {
      const info = await sbx.files.mkdir(step.path);
      if ("type" in exp) check(step, "type", info.type, exp.type);
      return;
    }
    case "remove":
      await sbx.files.remove(step.path, { recursive: step.recursive ?? false });
      return;
    case "rename":
      await sbx.files.rename(step.from, step.to);
      return;
    case "upload_tree": {
      const d = mkdtempSync(join(tmpdir(), "agentbox-ts-"));
      try {
        for (const [rel, v] of Object.entries(step.tree)) {
          mkdirSync(dirname(join(d, rel)), { recursive: true });
          writeFileSync(join(d, rel), blob(v));
        }
        await sbx.upload(d, step.remote);
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
      return;
    }
    case "download_tree": {
      const d = mkdtempSync(join(tmpdir(), "agentbox-ts-"));
      try {
        await sbx.download(step.remote, join(d, "out"));
        const want = Object.fromEntries(Object.entries(exp.tree).map(([k, v]) => [k, blob(v)]));
        check(step, "tree", readTree(join(d, "out")), want);
      } finally {
        rmSync(d, { recursive: true, force: true });
      }
      return;
    }
    case "set_ttl": {
      const info = await sbx.setTtl(step.seconds);
      if ("has_expiry" in exp) check(step, "has_expiry", info.expiresAt !== undefined, exp.has_expiry);
      return;
    }
    case "info": {
      const info = await sbx.info();
      for (const k of ["state", "template"]) if (k in exp) check(step, k, info[k], exp[k]);
      return;
    }
    case "destroy":
      await sbx.destroy();
      return;
    case "connect":
      await Sandbox.connect(step.id || sbx.id);
      return;
    case "create": {
      const { template, memory_mb, isolation, ...rest } = step.args;
      assert.deepEqual(rest, {}, "create args this runner does not map");
      created.push(await Sandbox.create({ template, memoryMb: memory_mb, isolation, ttlSeconds: 60 }));
      return;
    }
    case "start":
      await sbx.start(step.cmd, { tag: step.tag });
      return;
    case "wait":
    case "output":
    case "stdin":
    case "kill": {
      const p = await sbx.process(step.ref);
      if (step.op === "wait") {
        const info = await p.wait({ timeout: step.timeout_s });
        if ("exit_code" in exp) check(step, "exit_code", info.exitCode, exp.exit_code);
      } else if (step.op === "output") {
        const out = await p.output();
        for (const k of ["stdout", "stderr"]) if (k in exp) check(step, k, out[k], exp[k]);
      } else if (step.op === "stdin") {
        await p.sendStdin(step.text, { eof: step.eof ?? false });
      } else {
        await p.kill();
      }
      return;
    }
    case "pause":
    case "resume": {
      const info = await sbx[step.op]();
      if ("state" in exp) check(step, "state", info.state, exp.state);
      return;
    }
    case "fork": {
      const kids = await sbx.fork({ count: step.count });
      try {
        check(step, "count", kids.length, exp.count);
        for (const k of kids) check(step, "text", await k.files.readText(step.path), exp.text);
      } finally {
        for (const k of kids) await k.destroy();
      }
      return;
    }
    case "pty":
      await ptyStep(sbx, step, exp);
      return;
    case "snapshot":
      snaps[step.tag] = (await sbx.snapshot()).id;
      return;
    case "from_snapshot": {
      const s = await Sandbox.create({ snapshot: snaps[step.ref], ttlSeconds: 120, metadata: { suite: "behaviour" } });
      try {
        check(step, "text", await s.files.readText(step.path), exp.text);
      } finally {
        await s.destroy();
      }
      return;
    }
    case "run_code": {
      const ex = await sbx.runCode(step.code, {
        language: step.language,
        context: step.context,
        env: step.env,
        timeout: step.timeout_s,
      });
      const got = {
        text: ex.text ?? "",
        stdout: ex.logs.stdout.join(""),
        status: ex.status,
        restarted: ex.restarted,
        error_name: ex.error ? ex.error.name : "",
        formats: ex.results.length ? ex.results[0].formats() : [],
      };
      for (const k of Object.keys(got)) if (k in exp) check(step, k, got[k], exp[k]);
      return;
    }
    case "create_code_context": {
      const c = await sbx.createCodeContext({ language: step.language || "python", cwd: step.cwd, id: step.id });
      if ("state" in exp) check(step, "state", c.state, exp.state);
      return;
    }
    case "remove_code_context":
      await sbx.removeCodeContext(step.id);
      return;
    default:
      assert.fail(`unknown op ${step.op} in the behaviour suite`);
  }
}

test("the behaviour suite is not empty", () => {
  assert.ok(cases.length >= 10, `found only ${cases.length} cases in ${dir}`);
});

for (const c of cases) {
  test(c.name, async () => {
    const created = [];
    const snaps = {};
    const sbx = c.no_sandbox
      ? undefined
      : await Sandbox.create({ template: c.template ?? "base", ttlSeconds: 300, metadata: { suite: "behaviour" } });
    try {
      for (const step of c.steps) {
        const want = step.expect?.error;
        try {
          await runStep(sbx, step, created, snaps);
        } catch (e) {
          if (want === undefined) throw e;
          assert.ok(e instanceof AgentboxError, `step ${JSON.stringify(step)}: threw ${e}, want ${want}`);
          const cls = errorFromCode(want, "").constructor;
          assert.ok(e instanceof cls, `step ${JSON.stringify(step)}: threw ${e.name} (${e.code}: ${e.message}), want ${cls.name} (${want})`);
          continue;
        }
        assert.equal(want, undefined, `step ${JSON.stringify(step)}: succeeded, want error ${want}`);
      }
    } finally {
      for (const s of [...created, ...(sbx ? [sbx] : [])]) await s.destroy();
    }
  });
}
