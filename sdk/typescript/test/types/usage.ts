// Compiled (not run) by types.test.mjs: the package's declarations
// describe the surface a user writes against, from ESM and CommonJS.
import { Sandbox, Client, NotFoundError, type ExecResult, type ExecEvent, type FileInfo } from "agentbox";

export async function use(signal: AbortSignal): Promise<void> {
  const sbx: Sandbox = await Sandbox.create({ template: "base", ttlSeconds: 300, signal });
  const r: ExecResult = await sbx.exec("echo hi", { timeout: 5, signal, onStdout: (s: string) => s });
  const code: number = r.exitCode;
  for await (const ev of sbx.execStream(["ls", "/"], { signal })) {
    const e: ExecEvent = ev;
    if (e.type === "exit") console.log(e.result.stdout, code);
  }
  const f: FileInfo = await sbx.files.write("/tmp/a", "x", { mode: 0o644, signal });
  const b: Buffer = await sbx.files.read(f.path, { signal });
  const p = await sbx.start("sleep 1", { tag: "t" });
  await p.wait({ timeout: 5 });
  const t = await sbx.pty({ cols: 80, rows: 24 });
  for await (const chunk of t) console.log(chunk.length, b.length);
  const ex = await sbx.runCode("1+1", { language: "python" });
  console.log(ex.text, ex.results[0]?.formats());
  const kids: Sandbox[] = await sbx.fork({ count: 2 });
  await sbx.snapshot({ name: "s" });
  await sbx.setEgress({ egress: "custom", allow: ["example.org"] });
  for await (const ev of new Client().events({ types: ["created"], signal })) console.log(ev.type);
  try {
    await sbx.files.stat("/nope");
  } catch (e) {
    if (e instanceof NotFoundError) console.log(e.code, e.status, kids.length);
  }
  // @ts-expect-error: the timeout is seconds, a number
  await sbx.exec("true", { timeout: "5" });
}
