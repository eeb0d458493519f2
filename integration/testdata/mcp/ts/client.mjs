// Drives agentbox with the official MCP TypeScript SDK's client.
//   node client.mjs stdio  AGENTBOX_BINARY        (agentbox mcp, launched)
//   node client.mjs http   URL KEY                (the daemon's /mcp)
//   node client.mjs hosted URL KEY                (a hosted server's endpoint)
// It prints one JSON object of what it saw; the Go test judges it.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [mode, target, key] = process.argv.slice(2);
const transport = mode === "stdio"
  ? new StdioClientTransport({ command: target, args: ["mcp"], env: { ...process.env }, stderr: "inherit" })
  : new StreamableHTTPClientTransport(new URL(target), { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
const client = new Client({ name: "agentbox-ts-test", version: "1.0.0" });
await client.connect(transport);
const text = (r) => r.content.filter((c) => c.type === "text").map((c) => c.text).join("");
const out = { server: client.getServerVersion()?.name, tools: (await client.listTools()).tools.map((t) => t.name) };

if (mode === "hosted") {
  const r = await client.callTool({ name: "list_dir", arguments: { path: "/data" } });
  out.list = text(r);
  out.isError = r.isError ?? false;
} else {
  const created = text(await client.callTool({ name: "sandbox_create", arguments: { template: "busybox", ttl: "5m" } }));
  const id = created.match(/created sandbox (\S+)/)[1];
  out.id = id;
  const ex = await client.callTool({ name: "exec", arguments: { sandbox_id: id, command: "echo ts-$((6*7))" } });
  out.exec = text(ex);
  out.execError = ex.isError ?? false;
  await client.callTool({ name: "file_write", arguments: { sandbox_id: id, path: "/tmp/ts.txt", content: "from typescript" } });
  out.read = text(await client.callTool({ name: "file_read", arguments: { sandbox_id: id, path: "/tmp/ts.txt" } }));
  // A call without its command fails, as a tool error or a protocol
  // error, and the session goes on.
  try {
    const bad = await client.callTool({ name: "exec", arguments: { sandbox_id: id } });
    out.badError = bad.isError ?? false;
  } catch (e) {
    out.badError = true;
  }
  out.after = text(await client.callTool({ name: "exec", arguments: { sandbox_id: id, command: "echo still" } }));
  out.destroy = text(await client.callTool({ name: "sandbox_destroy", arguments: { sandbox_id: id } }));

  // run_code on the python template's kernel: state across calls, a plot
  // as image content, an exception as a tool error.
  const py = text(await client.callTool({ name: "sandbox_create", arguments: { template: "python", ttl: "5m", memory: "1G" } }))
    .match(/created sandbox (\S+)/)[1];
  await client.callTool({ name: "run_code", arguments: { sandbox_id: py, code: "x = 6 * 7" } });
  out.codeState = text(await client.callTool({ name: "run_code", arguments: { sandbox_id: py, language: "python", code: "print(f'ts-{x}')" } }));
  const plot = await client.callTool({ name: "run_code", arguments: { sandbox_id: py, code: "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()" } });
  out.codeImages = plot.content.filter((c) => c.type === "image").map((c) => `${c.mimeType} ${Buffer.from(c.data, "base64").subarray(1, 4)}`);
  const raised = await client.callTool({ name: "run_code", arguments: { sandbox_id: py, code: "1 / 0" } });
  out.codeError = text(raised);
  out.codeIsError = raised.isError ?? false;
  await client.callTool({ name: "sandbox_destroy", arguments: { sandbox_id: py } });
}
console.log(JSON.stringify(out));
await client.close();
