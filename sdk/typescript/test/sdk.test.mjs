// What the shared suite does not cover, against a real daemon: AbortSignal,
// the terminal as an async iterator, the daemon-wide Client, a wrong key.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Sandbox, Client, UnauthorizedError, TimeoutError } from "agentbox";

const isAbort = (e) => e?.name === "AbortError";

test("AbortSignal", async (t) => {
  const sbx = await Sandbox.create({ template: "base", ttlSeconds: 300, metadata: { suite: "ts-sdk" } });
  try {
    await t.test("an aborted signal rejects before sending", async () => {
      const ctl = new AbortController();
      ctl.abort();
      await assert.rejects(sbx.exec("true", { signal: ctl.signal }), isAbort);
      await assert.rejects(sbx.files.read("/etc/hostname", { signal: ctl.signal }), isAbort);
    });
    await t.test("aborting a running exec rejects it with the signal's reason", async () => {
      const ctl = new AbortController();
      const started = Date.now();
      const p = sbx.exec("sleep 30", { signal: ctl.signal });
      setTimeout(() => ctl.abort(), 300);
      await assert.rejects(p, isAbort);
      assert.ok(Date.now() - started < 20_000, "the abort did not end the call");
      const reason = new Error("mine");
      const c2 = new AbortController();
      const s = sbx.execStream("sleep 30", { signal: c2.signal });
      setTimeout(() => c2.abort(reason), 300);
      await assert.rejects(s.next(), (e) => e === reason);
    });
    await t.test("the sandbox still serves after aborted calls", async () => {
      const r = await sbx.exec("echo ok");
      assert.equal(r.stdout, "ok\n");
    });
    await t.test("a terminal's read takes a signal and a timeout", async () => {
      const pty = await sbx.pty({ cmd: ["cat"] });
      try {
        await assert.rejects(pty.read({ timeout: 0.2 }), TimeoutError);
        const ctl = new AbortController();
        const r = pty.read({ signal: ctl.signal });
        ctl.abort();
        await assert.rejects(r, isAbort);
      } finally {
        await pty.close();
      }
    });
  } finally {
    await sbx.destroy();
  }
});

test("a terminal as an async iterator, resized", async () => {
  const sbx = await Sandbox.create({ template: "base", ttlSeconds: 300, metadata: { suite: "ts-sdk" } });
  try {
    const pty = await sbx.pty({ cmd: ["sh"], cols: 80, rows: 24 });
    try {
      await pty.resize(100, 40);
      // stty reads the terminal's size once the resize has been applied.
      await pty.write("stty size; exit 5\n");
      let out = "";
      for await (const chunk of pty) out += chunk.toString();
      assert.match(out, /40 100/);
      assert.equal(pty.exitCode, 5);
    } finally {
      await pty.close();
    }
  } finally {
    await sbx.destroy();
  }
});

test("the Client: health, templates, events", async () => {
  const c = new Client();
  const h = await c.health();
  assert.equal(h.status, "ok");
  const names = (await c.templates()).map((t) => t.name);
  assert.ok(names.includes("base"), `templates: ${names}`);
  assert.equal((await c.template("base")).name, "base");
  const ctl = new AbortController();
  const events = c.events({ types: ["created"], signal: ctl.signal });
  const first = events.next(); // subscribes
  // The subscription is open once the daemon answered; creates until one
  // is seen (bounded), so a create racing the subscription is not missed.
  let sbx;
  const seen = [];
  try {
    const deadline = Date.now() + 60_000;
    let got;
    for (; !got && Date.now() < deadline; ) {
      const s = await Sandbox.create({ template: "base", ttlSeconds: 120, metadata: { suite: "ts-sdk" } });
      seen.push(s);
      got = await Promise.race([first, new Promise((r) => setTimeout(() => r(undefined), 2000))]);
    }
    assert.ok(got, "no created event within 60 s");
    assert.equal(got.value.type, "created");
    assert.ok(seen.some((s) => s.id === got.value.sandbox), JSON.stringify(got.value));
  } finally {
    ctl.abort();
    await first.catch(() => {});
    for (const s of seen) await s.destroy();
    void sbx;
  }
});

test("a wrong key is UnauthorizedError", async () => {
  await assert.rejects(new Client({ apiKey: "ab_wrong" }).templates(), UnauthorizedError);
});

test("listPage walks the list a page at a time", async () => {
  const label = "ts-pages-" + Math.random().toString(16).slice(2, 10);
  const made = [];
  for (let i = 0; i < 3; i++) made.push(await Sandbox.create({ template: "busybox", ttlSeconds: 300, metadata: { label } }));
  try {
    const seen = [];
    let cursor = undefined;
    let pages = 0;
    for (;;) {
      const page = await Sandbox.listPage({ metadata: { label }, limit: 2, cursor });
      pages++;
      seen.push(...page.sandboxes.map((s) => s.id));
      if (page.nextCursor === null) break;
      cursor = page.nextCursor;
    }
    assert.equal(pages, 2);
    assert.deepEqual(seen, (await Sandbox.list({ metadata: { label } })).map((s) => s.id));
    assert.deepEqual([...seen].sort(), made.map((s) => s.id).sort());
    await assert.rejects(Sandbox.listPage({ limit: 0 }), /limit must be/);
  } finally {
    for (const s of made) await s.destroy();
  }
});

test("desktop: start, screenshot, input, windows, live view", async () => {
  const sbx = await Sandbox.create({ template: "desktop", ttlSeconds: 300 });
  try {
    const info = await sbx.desktop.start();
    assert.equal(info.state, "running");
    assert.equal(info.width, 1024);
    const png = await sbx.desktop.screenshot();
    assert.equal(png.format, "png");
    assert.deepEqual(png.data.subarray(1, 4).toString(), "PNG");
    assert.equal(png.width, 1024);
    assert.equal(png.height, 768);
    const jpeg = await sbx.desktop.screenshot({ format: "jpeg", scale: "512x384" });
    assert.equal(jpeg.format, "jpeg");
    assert.equal(jpeg.width, 512);
    assert.equal(jpeg.screenWidth, 1024);
    await sbx.desktop.click(100, 120);
    assert.deepEqual(await sbx.desktop.cursor(), { x: 100, y: 120 });
    const r = await sbx.desktop.actions([{ type: "move", x: 300, y: 200 }], { screenshot: true });
    assert.deepEqual(r.cursor, { x: 300, y: 200 });
    assert.equal(r.screenshot.width, 1024);
    assert.ok(Array.isArray(await sbx.desktop.windows()));
    const url = await sbx.desktop.streamUrl();
    assert.match(url, /vnc\.html/);
    assert.match(url, /view_only=true/);
    await assert.rejects(sbx.desktop.drag([{ x: 1, y: 1 }]), /two points/);
    await sbx.desktop.stop();
    assert.equal((await sbx.desktop.status()).state, "stopped");
  } finally {
    await sbx.destroy();
  }
});
