/**
 * Sandbox, its files, processes and terminals, and the daemon-wide Client.
 *
 *     const sbx = await Sandbox.create({ template: "base", ttlSeconds: 300 });
 *     try {
 *       const r = await sbx.exec("echo hi");
 *     } finally {
 *       await sbx.destroy();
 *     }
 */
import * as fs from "node:fs/promises";
import * as path from "node:path";
import { resolveConfig, type ConnectionOptions } from "./config.js";
import {
  AgentboxError,
  ConflictError,
  InvalidArgumentError,
  NotFoundError,
  TimeoutError,
  UnavailableError,
  errorFromCode,
} from "./errors.js";
import { Http, lines, sandboxPath, throwIfAborted, transportError, type CallOptions, type RequestBody } from "./http.js";
import * as m from "./models.js";
import { Desktop } from "./desktop.js";
import {
  DEFAULT_TEMPLATE,
  commandFields,
  execBody,
  fileMode,
  filePath,
  limitsBody,
  previewUrl,
  signalName,
  toBuffer,
  type Command,
  type Data,
  type ProcessSpec,
} from "./common.js";
import {
  Execution,
  codeContext,
  contextId,
  foldCodeEvent,
  runBody,
  type CodeContext,
  type CodeEvent,
  type ContextRef,
  type ExecutionError,
  type Result,
  type RunCodeOptions,
} from "./code.js";
import { WebSocketConn } from "./ws.js";
import { extract, packDir } from "./tar.js";

export type { CallOptions } from "./http.js";

/** Sandbox.create's options. */
export interface CreateOptions extends ConnectionOptions, CallOptions {
  /** Template name (default "base"). */
  template?: string;
  /** Destroyed this long after creation (-1: never; default: the daemon's). */
  ttlSeconds?: number;
  /** The isolation tier: "container", "gvisor". */
  isolation?: string;
  /** CPU in cores. */
  cpu?: number;
  memoryMb?: number;
  diskMb?: number;
  pids?: number;
  /** Every command's default environment. */
  env?: Record<string, string>;
  /** Free-form labels to find it by with Sandbox.list. */
  metadata?: Record<string, string>;
  /** Egress policy and previews, sent as given (docs/network.md). */
  network?: Record<string, unknown>;
  /** Start from a snapshot (id or name) instead of a template. */
  snapshot?: string;
  /** What the TTL does: "destroy" or "pause". */
  onTimeout?: "destroy" | "pause";
  /** Let commands resume a paused sandbox. */
  autoResume?: boolean;
  /** Seconds without use after which onTimeout applies. */
  idleTimeout?: number;
  /**
   * Per-user kernel counts, e.g. `{ inotify_watches: 524288 }` for a file
   * watcher on a large tree; the rest stay the template's.
   */
  userLimits?: m.UserLimits;
}


export interface ExecOptions extends ProcessSpec, CallOptions {
  /** Bytes for the command's stdin. */
  stdin?: Data;
  /** Called with stdout text as it comes (then exec streams). */
  onStdout?: (text: string) => unknown;
  /** Called with stderr text as it comes (then exec streams). */
  onStderr?: (text: string) => unknown;
}

/** One event of execStream: output as it comes, then the exit. */
export type ExecEvent =
  | { type: "stdout" | "stderr"; data: Buffer; text: string }
  | { type: "exit"; result: m.ExecResult };

export interface StartOptions extends ProcessSpec, CallOptions {
  /** A name to find the process by. */
  tag?: string;
}

export interface PtyOptions extends CallOptions {
  cols?: number;
  rows?: number;
  /** Default: the user's shell. */
  cmd?: Command;
  env?: Record<string, string>;
  cwd?: string;
  user?: string;
}

export interface WriteOptions extends CallOptions {
  /** e.g. 0o755 or "0755". */
  mode?: number | string;
  user?: string;
}

export interface EgressOptions extends CallOptions {
  /** "none", "internet" or "custom". */
  egress: string;
  /** Domains ("*.example.org"), CIDRs, addresses and ports. */
  allow?: string[];
  deny?: string[];
  /** Connections open at once: 0 keeps the limit, -1 removes it. */
  maxConnections?: number;
  /** Each way, in Mbit/s: 0 keeps the limit, -1 removes it. */
  bandwidthMbit?: number;
}

export interface RunCodeCallbacks {
  onStdout?: (text: string) => unknown;
  onStderr?: (text: string) => unknown;
  onResult?: (r: Result) => unknown;
  onError?: (e: ExecutionError) => unknown;
}

function createBody(o: CreateOptions): Record<string, unknown> {
  // A snapshot replaces the template; the daemon refuses both at once.
  const body: Record<string, unknown> = o.snapshot && !o.template ? {} : { template: o.template || DEFAULT_TEMPLATE };
  const fields: Array<[string, unknown]> = [
    ["ttl_seconds", o.ttlSeconds],
    ["isolation", o.isolation],
    ["cpu", o.cpu],
    ["memory_mb", o.memoryMb],
    ["disk_mb", o.diskMb],
    ["pids", o.pids],
    ["network", o.network],
    ["snapshot", o.snapshot],
    ["on_timeout", o.onTimeout],
    ["auto_resume", o.autoResume],
    ["idle_timeout", o.idleTimeout],
    ["user_limits", o.userLimits],
  ];
  for (const [k, v] of fields) if (v !== undefined && v !== null) body[k] = v;
  if (o.env && Object.keys(o.env).length) body.env = { ...o.env };
  if (o.metadata && Object.keys(o.metadata).length) body.metadata = { ...o.metadata };
  return body;
}

async function* bodyOf(data: Data | AsyncIterable<Uint8Array> | Iterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  if (typeof data === "string" || data instanceof Uint8Array) {
    yield toBuffer(data);
    return;
  }
  for await (const c of data as AsyncIterable<Uint8Array>) yield typeof c === "string" ? Buffer.from(c) : c;
}

/** Files inside a sandbox (`sbx.files`); relative paths are the guest's. */
export class Files {
  constructor(
    private readonly http: Http,
    private readonly id: string,
  ) {}

  /**
   * Write data (a string, bytes, or an async iterable of chunks such as a
   * file's read stream, sent as it is read) to path, making parents.
   */
  async write(
    path: string,
    data: Data | AsyncIterable<Uint8Array> | Iterable<Uint8Array>,
    opts: WriteOptions = {},
  ): Promise<m.FileInfo> {
    const body: RequestBody =
      typeof data === "string" || data instanceof Uint8Array ? toBuffer(data) : bodyOf(data);
    const d = await this.http.json("PUT", sandboxPath(this.id, "/files"), {
      query: { path: filePath(path), mode: fileMode(opts.mode), user: opts.user || undefined },
      body,
      contentType: "application/octet-stream",
      signal: opts.signal,
    });
    return m.fileInfo(d);
  }

  /** The bytes of a regular file. */
  read(path: string, opts: CallOptions = {}): Promise<Buffer> {
    return this.http.bytes("GET", sandboxPath(this.id, "/files"), { query: { path: filePath(path) }, signal: opts.signal });
  }

  /** The content of a text file. */
  async readText(path: string, opts: CallOptions = {}): Promise<string> {
    return (await this.read(path, opts)).toString("utf8");
  }

  /** A file's bytes as they arrive: `for await (const chunk of ...)`. */
  async *readStream(path: string, opts: CallOptions = {}): AsyncGenerator<Buffer> {
    const res = await this.http.open("GET", sandboxPath(this.id, "/files"), {
      query: { path: filePath(path) },
      signal: opts.signal,
    });
    try {
      for await (const c of res) yield c as Buffer;
    } catch (e) {
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
  }

  /** Entries of a directory, descending depth levels (1: its own). */
  async list(path = ".", opts: CallOptions & { depth?: number } = {}): Promise<m.FileInfo[]> {
    const depth = opts.depth ?? 1;
    if (!(depth >= 1)) throw new InvalidArgumentError(`depth must be 1 or more, got ${depth}`);
    const d = await this.http.json("GET", sandboxPath(this.id, "/files/list"), {
      query: { path: filePath(path), depth },
      signal: opts.signal,
    });
    return (d?.entries ?? []).map(m.fileInfo);
  }

  /** Describe one file (a final symlink is not followed). */
  async stat(path: string, opts: CallOptions = {}): Promise<m.FileInfo> {
    const d = await this.http.json("GET", sandboxPath(this.id, "/files/stat"), {
      query: { path: filePath(path) },
      signal: opts.signal,
    });
    return m.fileInfo(d);
  }

  /** Whether anything exists at path. */
  async exists(path: string, opts: CallOptions = {}): Promise<boolean> {
    try {
      await this.stat(path, opts);
      return true;
    } catch (e) {
      if (e instanceof NotFoundError) return false;
      throw e;
    }
  }

  /** Create a directory and its parents (mkdir -p). */
  async mkdir(path: string, opts: WriteOptions = {}): Promise<m.FileInfo> {
    const body: Record<string, unknown> = { path: filePath(path) };
    if (opts.mode !== undefined) body.mode = fileMode(opts.mode);
    if (opts.user) body.user = opts.user;
    return m.fileInfo(
      await this.http.json("POST", sandboxPath(this.id, "/files/mkdir"), { json: body, signal: opts.signal }),
    );
  }

  /** Remove a file or an empty directory; with recursive, a tree. */
  remove(path: string, opts: CallOptions & { recursive?: boolean } = {}): Promise<void> {
    return this.http.send("DELETE", sandboxPath(this.id, "/files"), {
      query: { path: filePath(path), recursive: opts.recursive ? "true" : undefined },
      signal: opts.signal,
    });
  }

  /** Move a file or directory inside the sandbox. */
  rename(from: string, to: string, opts: CallOptions = {}): Promise<void> {
    if (!from || !to) throw new InvalidArgumentError("rename wants both a source and a destination path");
    return this.http.send("POST", sandboxPath(this.id, "/files/rename"), {
      json: { from, to },
      signal: opts.signal,
    });
  }
}

/** A background process started with `sbx.start()`. */
export class Process {
  constructor(
    private readonly http: Http,
    private readonly sandboxId: string,
    /** Its info as last seen. */
    public info: m.ProcessInfo,
  ) {}

  get pid(): number {
    return this.info.pid;
  }
  get tag(): string {
    return this.info.tag;
  }
  get exitCode(): number | undefined {
    return this.info.exitCode;
  }

  private path(rest = ""): string {
    return sandboxPath(this.sandboxId, `/processes/${this.pid}${rest}`);
  }

  /**
   * Wait for the process to end and return its final info; TimeoutError
   * when it still runs after timeout seconds.
   */
  async wait(opts: CallOptions & { timeout?: number } = {}): Promise<m.ProcessInfo> {
    const q = opts.timeout === undefined ? {} : { timeout_ms: Math.max(1, Math.floor(opts.timeout * 1000)) };
    this.info = m.processInfo(await this.http.json("POST", this.path("/wait"), { query: q, signal: opts.signal }));
    if (this.info.state === "running") {
      throw new TimeoutError(`process ${this.pid} still runs after ${opts.timeout} s`);
    }
    return this.info;
  }

  /** Output from the given offsets (default: all the daemon holds). */
  async output(opts: CallOptions & { stdoutOffset?: number; stderrOffset?: number } = {}): Promise<m.ProcessOutput> {
    const d = await this.http.json("GET", this.path("/output"), {
      query: { stdout_offset: opts.stdoutOffset ?? 0, stderr_offset: opts.stderrOffset ?? 0 },
      signal: opts.signal,
    });
    return m.processOutput(d);
  }

  /** Write to the process's stdin; eof closes it after. */
  sendStdin(data: Data, opts: CallOptions & { eof?: boolean } = {}): Promise<void> {
    return this.http.send("POST", this.path("/stdin"), {
      query: { eof: opts.eof ? "true" : undefined },
      body: toBuffer(data),
      contentType: "application/octet-stream",
      signal: opts.signal,
    });
  }

  /** Close the process's stdin. */
  closeStdin(opts: CallOptions = {}): Promise<void> {
    return this.sendStdin("", { ...opts, eof: true });
  }

  /** Send a signal ("SIGTERM", "INT" or 15); tree: to all it started too. */
  signal(sig: string | number, opts: CallOptions & { tree?: boolean } = {}): Promise<void> {
    return this.http.send("POST", this.path("/signal"), {
      json: { signal: signalName(sig), tree: !!opts.tree },
      signal: opts.signal,
    });
  }

  /** Kill it and all it started, wait for its end and forget it. */
  kill(opts: CallOptions = {}): Promise<void> {
    return this.http.send("DELETE", this.path(), { signal: opts.signal });
  }

  /** Re-read the process's info. */
  async refresh(opts: CallOptions = {}): Promise<m.ProcessInfo> {
    this.info = m.processInfo(await this.http.json("GET", this.path(), { signal: opts.signal }));
    return this.info;
  }
}

/**
 * A terminal in a sandbox (`sbx.pty()`). `read()` gives the next output,
 * an empty Buffer once the program exited (then `exitCode` is set);
 * `for await (const chunk of pty)` reads to the end.
 */
export class Pty implements AsyncIterable<Buffer> {
  exitCode?: number;

  constructor(
    private readonly http: Http,
    private readonly sandboxId: string,
    readonly pid: number,
    readonly id: string,
    private readonly ws: WebSocketConn,
  ) {}

  /** Type into the terminal (a string is UTF-8 encoded). */
  write(data: Data): Promise<void> {
    return this.ws.send(toBuffer(data));
  }

  /**
   * The terminal's next output; empty once it exited. TimeoutError when
   * nothing came within timeout seconds.
   */
  async read(opts: CallOptions & { timeout?: number } = {}): Promise<Buffer> {
    throwIfAborted(opts.signal);
    const ctl = new AbortController();
    const onAbort = () => ctl.abort(opts.signal!.reason);
    opts.signal?.addEventListener("abort", onAbort, { once: true });
    let timer: NodeJS.Timeout | undefined;
    if (opts.timeout !== undefined) {
      timer = setTimeout(
        () => ctl.abort(new TimeoutError(`no terminal output within ${opts.timeout} s`)),
        Math.max(0, opts.timeout * 1000),
      );
    }
    try {
      for (;;) {
        const msg = await this.ws.next(ctl.signal);
        if (msg === null) return Buffer.alloc(0);
        if (msg.binary) return msg.data;
        try {
          const ev = JSON.parse(msg.data.toString("utf8"));
          if (ev.type === "exit") {
            this.exitCode = ev.exit_code;
            return Buffer.alloc(0);
          }
        } catch {
          // not an event: skipped
        }
      }
    } finally {
      clearTimeout(timer);
      opts.signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Read until the output so far contains marker; return it all. */
  async readUntil(marker: Data, opts: CallOptions & { timeout?: number } = {}): Promise<Buffer> {
    const want = toBuffer(marker);
    const timeout = opts.timeout ?? 30;
    const deadline = Date.now() + timeout * 1000;
    let buf = Buffer.alloc(0);
    while (!buf.includes(want)) {
      const left = (deadline - Date.now()) / 1000;
      if (left <= 0) {
        throw new TimeoutError(`${JSON.stringify(want.toString())} did not appear on the terminal within ${timeout} s`);
      }
      const c = await this.read({ timeout: left, signal: opts.signal });
      if (c.length === 0) {
        throw new ConflictError(`the terminal exited before ${JSON.stringify(want.toString())} appeared`);
      }
      buf = Buffer.concat([buf, c]);
    }
    return buf;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<Buffer> {
    for (;;) {
      const c = await this.read();
      if (c.length === 0) return;
      yield c;
    }
  }

  /** Change the terminal's size. */
  resize(cols: number, rows: number): Promise<void> {
    if (!(cols > 0 && rows > 0)) {
      throw new InvalidArgumentError(`a terminal wants positive cols and rows, got ${cols}x${rows}`);
    }
    return this.ws.send(JSON.stringify({ type: "resize", cols, rows }));
  }

  /** Close the connection and end the terminal's program. */
  async close(opts: CallOptions = {}): Promise<void> {
    await this.ws.close();
    await deletePty(this.http, this.sandboxId, this.pid, opts.signal);
  }
}

async function deletePty(h: Http, sandboxId: string, pid: number, signal?: AbortSignal): Promise<void> {
  try {
    await h.send("DELETE", sandboxPath(sandboxId, `/pty/${pid}`), { signal });
  } catch (e) {
    if (!(e instanceof NotFoundError)) throw e;
  }
}

/** A disposable Linux sandbox. */
export class Sandbox {
  /** Files inside the sandbox. */
  readonly files: Files;
  /** The sandbox's desktop, on a template that has one (docs/desktop.md). */
  readonly desktop: Desktop;

  private constructor(
    private _info: m.SandboxInfo,
    private readonly http: Http,
  ) {
    this.files = new Files(http, _info.id);
    this.desktop = new Desktop(http, _info.id);
  }

  /** The sandbox's id. */
  get id(): string {
    return this._info.id;
  }

  /**
   * Create a sandbox and resolve once it can run commands. Configuration
   * comes from apiKey/baseUrl or AGENTBOX_API_KEY/AGENTBOX_HOST; as root on
   * the daemon's host none is needed.
   */
  static async create(opts: CreateOptions = {}): Promise<Sandbox> {
    const http = new Http(resolveConfig(opts));
    const d = await http.json("POST", "/v1/sandboxes", { json: createBody(opts), signal: opts.signal });
    return new Sandbox(m.sandboxInfo(d), http);
  }

  /** Attach to an existing sandbox. */
  static async connect(sandboxId: string, opts: ConnectionOptions & CallOptions = {}): Promise<Sandbox> {
    const http = new Http(resolveConfig(opts));
    return new Sandbox(m.sandboxInfo(await http.json("GET", sandboxPath(sandboxId), { signal: opts.signal })), http);
  }

  /** Sandboxes the key can see, filtered by every metadata pair and state. */
  static async list(
    opts: ConnectionOptions & CallOptions & { metadata?: Record<string, string>; state?: string } = {},
  ): Promise<m.SandboxInfo[]> {
    const http = new Http(resolveConfig(opts));
    const query: Record<string, string> = {};
    for (const [k, v] of Object.entries(opts.metadata ?? {})) query["metadata." + k] = v;
    if (opts.state) query.state = opts.state;
    const d = await http.json("GET", "/v1/sandboxes", { query, signal: opts.signal });
    return (d?.sandboxes ?? []).map(m.sandboxInfo);
  }

  /**
   * A page of at most `limit` sandboxes (1-1000, default 100), oldest
   * first, filtered like `list`; pass its `nextCursor` back as `cursor`
   * (with the same filters and limit) for the next page.
   */
  static async listPage(
    opts: ConnectionOptions &
      CallOptions & { metadata?: Record<string, string>; state?: string; limit?: number; cursor?: string } = {},
  ): Promise<m.SandboxPage> {
    const limit = opts.limit ?? 100;
    if (!Number.isInteger(limit) || limit < 1 || limit > 1000) {
      throw new InvalidArgumentError(`limit must be a whole number from 1 to 1000, got ${limit}`);
    }
    const http = new Http(resolveConfig(opts));
    const query: Record<string, string> = { limit: String(limit) };
    for (const [k, v] of Object.entries(opts.metadata ?? {})) query["metadata." + k] = v;
    if (opts.state) query.state = opts.state;
    if (opts.cursor) query.cursor = opts.cursor;
    const d = await http.json("GET", "/v1/sandboxes", { query, signal: opts.signal });
    return { sandboxes: (d?.sandboxes ?? []).map(m.sandboxInfo), nextCursor: d?.next_cursor || null };
  }

  /** The sandbox as the daemon sees it now. */
  async info(opts: CallOptions = {}): Promise<m.SandboxInfo> {
    return this.keep(await this.http.json("GET", sandboxPath(this.id), { signal: opts.signal }));
  }

  private keep(d: any): m.SandboxInfo {
    this._info = m.sandboxInfo(d);
    return this._info;
  }

  /** Expire the sandbox seconds from now; null or -1 removes the TTL. */
  async setTtl(seconds: number | null, opts: CallOptions = {}): Promise<m.SandboxInfo> {
    const secs = seconds === null || seconds < 0 ? -1 : Math.floor(seconds);
    return this.keep(
      await this.http.json("PATCH", sandboxPath(this.id), { json: { ttl_seconds: secs }, signal: opts.signal }),
    );
  }

  /** Destroy the sandbox and everything in it (no error if already gone). */
  async destroy(opts: CallOptions = {}): Promise<void> {
    try {
      await this.http.send("DELETE", sandboxPath(this.id), { signal: opts.signal });
    } catch (e) {
      if (!(e instanceof NotFoundError)) throw e;
    }
  }

  /**
   * Run a command to its end. A string runs through /bin/sh -c; an array
   * is an argv. timeout in seconds: the command (and all it started) is
   * killed and the result has timedOut true and exitCode 137, which is
   * not an error. onStdout/onStderr get text as it comes.
   */
  async exec(cmd: Command, opts: ExecOptions = {}): Promise<m.ExecResult> {
    if (!opts.onStdout && !opts.onStderr) {
      const body = execBody(cmd, opts);
      return m.execResult(
        await this.http.json("POST", sandboxPath(this.id, "/exec"), { json: body, signal: opts.signal }),
      );
    }
    const it = this.execStream(cmd, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
      const ev = r.value;
      if (ev.type === "stdout" && opts.onStdout && ev.text) await opts.onStdout(ev.text);
      if (ev.type === "stderr" && opts.onStderr && ev.text) await opts.onStderr(ev.text);
    }
  }

  /**
   * Run a command and yield its output as it comes, then its exit:
   * `for await (const ev of sbx.execStream("make"))`. The generator's
   * return value is the ExecResult too.
   */
  async *execStream(cmd: Command, opts: ProcessSpec & CallOptions & { stdin?: Data } = {}): AsyncGenerator<ExecEvent, m.ExecResult> {
    const body = execBody(cmd, opts);
    const res = await this.http.open("POST", sandboxPath(this.id, "/exec/stream"), {
      body: JSON.stringify(body) + "\n",
      contentType: "application/x-ndjson",
      signal: opts.signal,
    });
    const dec = { stdout: new TextDecoder("utf-8"), stderr: new TextDecoder("utf-8") };
    const data: { stdout: Buffer[]; stderr: Buffer[] } = { stdout: [], stderr: [] };
    try {
      for await (const line of lines(res)) {
        if (!line.trim()) continue;
        const ev = JSON.parse(line);
        if (ev.type === "stdout" || ev.type === "stderr") {
          const k = ev.type as "stdout" | "stderr";
          const b = Buffer.from(ev.data ?? "", "base64");
          data[k].push(b);
          yield { type: k, data: b, text: dec[k].decode(b, { stream: true }) };
        } else if (ev.type === "exit") {
          for (const k of ["stdout", "stderr"] as const) {
            const tail = dec[k].decode();
            if (tail) yield { type: k, data: Buffer.alloc(0), text: tail };
          }
          const result = m.execResultOf(Buffer.concat(data.stdout), Buffer.concat(data.stderr), ev);
          yield { type: "exit", result };
          return result;
        } else if (ev.type === "error") {
          const e = ev.error ?? {};
          throw errorFromCode(e.code ?? "internal", e.message ?? "the exec stream failed");
        }
      }
    } catch (e) {
      if (e instanceof AgentboxError) throw e;
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
    throw new UnavailableError("the exec stream ended before the command's exit was reported");
  }

  /** Start a background process and return at once. */
  async start(cmd: Command, opts: StartOptions = {}): Promise<Process> {
    const body = execBody(cmd, opts);
    if (opts.tag) body.tag = opts.tag;
    const d = await this.http.json("POST", sandboxPath(this.id, "/processes"), { json: body, signal: opts.signal });
    return new Process(this.http, this.id, m.processInfo(d));
  }

  /** The background processes the sandbox's agent knows of. */
  async processes(opts: CallOptions = {}): Promise<m.ProcessInfo[]> {
    const d = await this.http.json("GET", sandboxPath(this.id, "/processes"), { signal: opts.signal });
    return (d?.processes ?? []).map(m.processInfo);
  }

  /** Attach to a background process by pid or tag. */
  async process(ref: number | string, opts: CallOptions = {}): Promise<Process> {
    const d = await this.http.json("GET", sandboxPath(this.id, `/processes/${encodeURIComponent(String(ref))}`), {
      signal: opts.signal,
    });
    return new Process(this.http, this.id, m.processInfo(d));
  }

  /** Open an interactive terminal running cmd (default: the user's shell). */
  async pty(opts: PtyOptions = {}): Promise<Pty> {
    const cols = opts.cols ?? 80;
    const rows = opts.rows ?? 24;
    if (!(cols > 0 && rows > 0)) {
      throw new InvalidArgumentError(`a terminal wants positive cols and rows, got ${cols}x${rows}`);
    }
    const body: Record<string, unknown> = { cols, rows };
    if (opts.cmd !== undefined) Object.assign(body, commandFields(opts.cmd));
    if (opts.env && Object.keys(opts.env).length) body.env = { ...opts.env };
    if (opts.cwd) body.cwd = opts.cwd;
    if (opts.user) body.user = opts.user;
    const d = await this.http.json("POST", sandboxPath(this.id, "/pty"), { json: body, signal: opts.signal });
    const pid = Number(d.pid);
    let ws: WebSocketConn;
    try {
      ws = await WebSocketConn.open(this.http, sandboxPath(this.id, `/pty/${pid}/ws`), opts.signal);
    } catch (e) {
      await deletePty(this.http, this.id, pid).catch(() => {});
      throw e;
    }
    return new Pty(this.http, this.id, pid, String(d.id ?? pid), ws);
  }

  /**
   * Copy a local file or directory tree to remotePath in the sandbox (a
   * directory's content lands under remotePath).
   */
  async upload(localPath: string, remotePath: string, opts: CallOptions = {}): Promise<void> {
    const st = await fs.stat(localPath);
    if (st.isDirectory()) {
      await this.http.send("PUT", sandboxPath(this.id, "/files/archive"), {
        query: { path: filePath(remotePath) },
        body: packDir(localPath),
        contentType: "application/x-tar",
        signal: opts.signal,
      });
      return;
    }
    const fh = await fs.open(localPath, "r");
    try {
      await this.files.write(remotePath, fh.createReadStream({ autoClose: false }), {
        mode: st.mode & 0o777,
        signal: opts.signal,
      });
    } finally {
      await fh.close();
    }
  }

  /**
   * Copy a file or directory tree from the sandbox to localPath (a
   * directory's content lands under localPath).
   */
  async download(remotePath: string, localPath: string, opts: CallOptions = {}): Promise<void> {
    const st = await this.files.stat(remotePath, opts);
    if (st.type !== "dir") {
      await fs.mkdir(path.dirname(path.resolve(localPath)), { recursive: true });
      const fh = await fs.open(localPath, "w");
      try {
        for await (const c of this.files.readStream(remotePath, opts)) await fh.write(c);
      } finally {
        await fh.close();
      }
      return;
    }
    const res = await this.http.open("GET", sandboxPath(this.id, "/files/archive"), {
      query: { path: filePath(remotePath) },
      signal: opts.signal,
    });
    try {
      await extract(res, localPath);
    } catch (e) {
      if (e instanceof AgentboxError) throw e;
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
  }

  /**
   * Freeze every process in the sandbox; toDisk (gvisor tier) checkpoints
   * processes and memory to disk and frees the host memory.
   */
  async pause(opts: CallOptions & { toDisk?: boolean } = {}): Promise<m.SandboxInfo> {
    return this.keep(
      await this.http.json("POST", sandboxPath(this.id, "/pause"), {
        json: opts.toDisk ? { to_disk: true } : undefined,
        signal: opts.signal,
      }),
    );
  }

  /** Thaw a paused sandbox. */
  async resume(opts: CallOptions = {}): Promise<m.SandboxInfo> {
    return this.keep(await this.http.json("POST", sandboxPath(this.id, "/resume"), { signal: opts.signal }));
  }

  /**
   * Save the sandbox's state; Sandbox.create({ snapshot }) starts from it.
   * memory (gvisor tier) captures processes and memory too.
   */
  async snapshot(opts: CallOptions & { name?: string; memory?: boolean } = {}): Promise<m.Snapshot> {
    const body: Record<string, unknown> = {};
    if (opts.name) body.name = opts.name;
    if (opts.memory) body.memory = true;
    return m.snapshot(
      await this.http.json("POST", sandboxPath(this.id, "/snapshots"), { json: body, signal: opts.signal }),
    );
  }

  /**
   * Put the sandbox's files back to where it started (or to snapshot; or,
   * with template, to its template alone), in place; processes are ended.
   */
  async reset(opts: CallOptions & { snapshot?: string; template?: boolean } = {}): Promise<m.SandboxInfo> {
    if (opts.snapshot && opts.template) {
      throw new InvalidArgumentError("reset to a snapshot or to the template, not both");
    }
    const body: Record<string, unknown> = {};
    if (opts.snapshot) body.snapshot = opts.snapshot;
    if (opts.template) body.template = true;
    return this.keep(
      await this.http.json("POST", sandboxPath(this.id, "/reset"), { json: body, signal: opts.signal }),
    );
  }

  /**
   * Make count copies of the sandbox; memory (gvisor tier): each goes on
   * running the sandbox's processes.
   */
  async fork(opts: CallOptions & { count?: number; memory?: boolean; spread?: boolean } = {}): Promise<Sandbox[]> {
    const count = opts.count ?? 1;
    if (!(Number.isInteger(count) && count >= 1)) {
      throw new InvalidArgumentError(`count must be 1 or more, got ${count}`);
    }
    const body: Record<string, unknown> = { count };
    if (opts.memory) body.memory = true;
    // spread, through a fleet gateway: the copies go over the fleet's nodes (docs/cluster.md).
    if (opts.spread) body.spread = true;
    const d = await this.http.json("POST", sandboxPath(this.id, "/fork"), { json: body, signal: opts.signal });
    return (d?.sandboxes ?? []).map((s: any) => new Sandbox(m.sandboxInfo(s), this.http));
  }

  /**
   * The preview URL of port served inside the sandbox, with
   * ?agentbox_token= unless its previews are public.
   */
  async url(port: number, opts: CallOptions = {}): Promise<string> {
    return previewUrl(this.id, (await this.info(opts)).network, port);
  }

  /**
   * Replace the sandbox's egress policy and limits while it runs
   * (docs/network.md); new connections see it at once.
   */
  async setEgress(opts: EgressOptions): Promise<m.SandboxInfo> {
    const body = {
      egress: opts.egress,
      allow: [...(opts.allow ?? [])],
      deny: [...(opts.deny ?? [])],
      ...limitsBody(opts.maxConnections, opts.bandwidthMbit),
    };
    return this.keep(
      await this.http.json("POST", sandboxPath(this.id, "/egress"), { json: body, signal: opts.signal }),
    );
  }

  /** The egress log, oldest first: DNS queries and connections, with verdicts. */
  async egressLog(opts: CallOptions = {}): Promise<Record<string, any>[]> {
    const d = await this.http.json("GET", sandboxPath(this.id, "/egress/log"), { signal: opts.signal });
    return d?.entries ?? [];
  }

  /** Resource use over the last hour, oldest first (docs/observability.md). */
  async metrics(opts: CallOptions = {}): Promise<Record<string, any>[]> {
    const d = await this.http.json("GET", sandboxPath(this.id, "/metrics"), { signal: opts.signal });
    return d?.samples ?? [];
  }

  // --- code interpreter (docs/interpreter.md) ------------------------------

  /**
   * Run a cell in a code context and resolve with its Execution.
   * Exceptions in the code are `error`, not thrown.
   */
  async runCode(code: string, opts: RunCodeOptions & RunCodeCallbacks & CallOptions = {}): Promise<Execution> {
    const it = this.runCodeStream(code, opts);
    for (;;) {
      const r = await it.next();
      if (r.done) return r.value;
      const ev = r.value;
      if (ev.type === "stdout") await opts.onStdout?.(ev.text);
      else if (ev.type === "stderr") await opts.onStderr?.(ev.text);
      else if (ev.type === "result") await opts.onResult?.(ev.result);
      else if (ev.type === "error") await opts.onError?.(ev.error);
    }
  }

  /** Run a cell and yield its output, results and error as they come. */
  async *runCodeStream(code: string, opts: RunCodeOptions & CallOptions = {}): AsyncGenerator<CodeEvent, Execution> {
    const body = runBody(code, opts);
    const res = await this.http.open("POST", sandboxPath(this.id, "/code/run/stream"), {
      json: body,
      signal: opts.signal,
    });
    const ex = new Execution();
    try {
      for await (const line of lines(res)) {
        if (!line.trim()) continue;
        const { event, done } = foldCodeEvent(ex, JSON.parse(line));
        if (event) yield event;
        if (done) return ex;
      }
    } catch (e) {
      if (e instanceof AgentboxError) throw e;
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
    throw new UnavailableError(
      "the code stream ended before end_of_execution; the daemon or the sandbox may have gone away",
    );
  }

  /** Start a code context: a kernel with its own state. */
  async createCodeContext(
    opts: CallOptions & { language?: string; cwd?: string; env?: Record<string, string>; user?: string; id?: string } = {},
  ): Promise<CodeContext> {
    const body: Record<string, unknown> = { language: opts.language || "python" };
    for (const k of ["cwd", "env", "user", "id"] as const) if (opts[k]) body[k] = opts[k];
    return codeContext(
      await this.http.json("POST", sandboxPath(this.id, "/code/contexts"), { json: body, signal: opts.signal }),
    );
  }

  async listCodeContexts(opts: CallOptions = {}): Promise<CodeContext[]> {
    const d = await this.http.json("GET", sandboxPath(this.id, "/code/contexts"), { signal: opts.signal });
    return (d?.contexts ?? []).map(codeContext);
  }

  removeCodeContext(ctx: ContextRef, opts: CallOptions = {}): Promise<void> {
    return this.http.send("DELETE", sandboxPath(this.id, "/code/contexts/" + contextId(ctx)), {
      signal: opts.signal,
    });
  }

  /** Replace the context's kernel with a fresh one: its state is lost. */
  async restartCodeContext(ctx: ContextRef, opts: CallOptions = {}): Promise<CodeContext> {
    const p = sandboxPath(this.id, "/code/contexts/" + contextId(ctx) + "/restart");
    return codeContext(await this.http.json("POST", p, { signal: opts.signal }));
  }

  /** Interrupt the context's running cell; its state is kept. */
  async interruptCodeContext(ctx: ContextRef, opts: CallOptions = {}): Promise<CodeContext> {
    const p = sandboxPath(this.id, "/code/contexts/" + contextId(ctx) + "/interrupt");
    return codeContext(await this.http.json("POST", p, { signal: opts.signal }));
  }
}

/** A registry reference, checked before anything is sent. */
function registryRef(ref: string, what: string): string {
  if (!ref) {
    throw new InvalidArgumentError(
      `a registry reference to ${what} is required: HOST[:PORT]/REPO[:TAG], the registry's host always written out`,
    );
  }
  return ref;
}

/** A lifecycle event of GET /v1/events (docs/observability.md). */
export type LifecycleEvent = Record<string, any> & { seq?: number; type?: string; time?: string };

/**
 * Daemon-wide calls: health, pools, templates, template builds, registry
 * push and pull, fleet status, events.
 */
export class Client {
  private readonly http: Http;

  constructor(opts: ConnectionOptions = {}) {
    this.http = new Http(resolveConfig(opts));
  }

  async health(opts: CallOptions = {}): Promise<m.Health> {
    return m.health(await this.http.json("GET", "/v1/health", { signal: opts.signal }));
  }

  /** The warm pools: ready sandboxes per template and tier. */
  async pools(opts: CallOptions = {}): Promise<m.PoolStatus[]> {
    const d = await this.http.json("GET", "/v1/pools", { signal: opts.signal });
    return (d?.pools ?? []).map(m.poolStatus);
  }

  /** The templates sandboxes can be created from. */
  async templates(opts: CallOptions = {}): Promise<m.Template[]> {
    const d = await this.http.json("GET", "/v1/templates", { signal: opts.signal });
    return (d?.templates ?? []).map(m.template);
  }

  /** The newest version of one template. */
  async template(name: string, opts: CallOptions = {}): Promise<m.Template> {
    if (!name) throw new InvalidArgumentError("a template name is required");
    return m.template(await this.http.json("GET", "/v1/templates/" + encodeURIComponent(name), { signal: opts.signal }));
  }

  /**
   * Delete every version of a template: a tenant's own, or any with an
   * admin key (DELETE /v1/templates/{name}). ConflictError while a sandbox
   * or snapshot uses it.
   */
  async removeTemplate(name: string, opts: CallOptions = {}): Promise<void> {
    if (!name) throw new InvalidArgumentError("a template name is required");
    await this.http.send("DELETE", "/v1/templates/" + encodeURIComponent(name), { signal: opts.signal });
  }

  /**
   * Push the newest version of template name to an OCI registry as an
   * image (POST /v1/templates/{name}/push; docs/cluster.md): ref is
   * HOST[:PORT]/REPO[:TAG], the registry's host always written out.
   * Resolves to the ref and the manifest's digest.
   */
  async pushTemplate(name: string, ref: string, opts: CallOptions = {}): Promise<m.PushResult> {
    if (!name) throw new InvalidArgumentError("a template name is required");
    const d = await this.http.json("POST", "/v1/templates/" + encodeURIComponent(name) + "/push", {
      json: { ref: registryRef(ref, "push to") },
      signal: opts.signal,
    });
    return m.pushResult(d);
  }

  /**
   * Pull the OCI image at ref (HOST[:PORT]/REPO[:TAG|@DIGEST]) as a new
   * version of template opts.name (default: the repository's last
   * component) (POST /v1/templates/pull).
   */
  async pullTemplate(ref: string, opts: CallOptions & { name?: string } = {}): Promise<m.Template> {
    const body: Record<string, string> = { ref: registryRef(ref, "pull") };
    if (opts.name) body.name = opts.name;
    return m.template(await this.http.json("POST", "/v1/templates/pull", { json: body, signal: opts.signal }));
  }

  /**
   * Push a snapshot's files (its id or name) to ref as an OCI artifact
   * (POST /v1/snapshots/{ref}/push); another node pulls it with
   * pullSnapshot.
   */
  async pushSnapshot(snapshot: string, ref: string, opts: CallOptions = {}): Promise<m.PushResult> {
    if (!snapshot) throw new InvalidArgumentError("a snapshot id or name is required");
    const d = await this.http.json("POST", "/v1/snapshots/" + encodeURIComponent(snapshot) + "/push", {
      json: { ref: registryRef(ref, "push to") },
      signal: opts.signal,
    });
    return m.pushResult(d);
  }

  /**
   * Pull a pushed snapshot from ref into a new snapshot here, named
   * opts.name (none by default), its template pulled too when missing
   * (POST /v1/snapshots/pull); create sandboxes from it with
   * Sandbox.create({ snapshot }).
   */
  async pullSnapshot(ref: string, opts: CallOptions & { name?: string } = {}): Promise<m.Snapshot> {
    const body: Record<string, string> = { ref: registryRef(ref, "pull") };
    if (opts.name) body.name = opts.name;
    return m.snapshot(await this.http.json("POST", "/v1/snapshots/pull", { json: body, signal: opts.signal }));
  }

  /**
   * A fleet gateway's nodes (GET /v1/fleet/nodes, an admin key). A daemon
   * that is not a gateway rejects with NotSupportedError.
   */
  async fleetNodes(opts: CallOptions = {}): Promise<m.FleetNode[]> {
    const d = await this.http.json("GET", "/v1/fleet/nodes", { signal: opts.signal });
    return (d?.nodes ?? []).map(m.fleetNode);
  }

  /** This daemon's status as a fleet gateway polls it (GET /v1/node, an admin key). */
  async nodeStatus(opts: CallOptions = {}): Promise<m.NodeStatus> {
    return m.nodeStatus(await this.http.json("GET", "/v1/node", { signal: opts.signal }));
  }

  /**
   * Build a new version of template name from a YAML build spec
   * (docs/templates.md); contextDir is what copy steps read from. Yields
   * nothing: progress events go to onEvent. A failing step rejects with
   * InvalidArgumentError naming it.
   */
  async buildTemplate(
    name: string,
    spec: string | Uint8Array,
    opts: CallOptions & { contextDir?: string; onEvent?: (ev: Record<string, any>) => unknown } = {},
  ): Promise<m.Template> {
    if (!name) throw new InvalidArgumentError("a template name is required");
    if (opts.contextDir !== undefined && !(await fs.stat(opts.contextDir).catch(() => null))?.isDirectory()) {
      throw new InvalidArgumentError(`contextDir ${JSON.stringify(opts.contextDir)} is not a directory`);
    }
    const boundary = "agentbox-" + Math.random().toString(16).slice(2) + Date.now().toString(16);
    const specBytes = toBuffer(spec);
    const contextDir = opts.contextDir;
    async function* body(): AsyncGenerator<Uint8Array> {
      yield Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="spec"; filename="spec.yaml"\r\n` +
          "Content-Type: application/x-yaml\r\n\r\n",
      );
      yield specBytes;
      yield Buffer.from("\r\n");
      if (contextDir !== undefined) {
        yield Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="context"; filename="context.tar"\r\n` +
            "Content-Type: application/x-tar\r\n\r\n",
        );
        yield* packDir(contextDir);
        yield Buffer.from("\r\n");
      }
      yield Buffer.from(`--${boundary}--\r\n`);
    }
    const res = await this.http.open("POST", "/v1/templates/build", {
      query: { name },
      body: body(),
      contentType: "multipart/form-data; boundary=" + boundary,
      signal: opts.signal,
    });
    try {
      for await (const line of lines(res)) {
        if (!line.trim()) continue;
        const ev = JSON.parse(line);
        if (ev.type === "done") return m.template(ev.template);
        if (ev.type === "error") {
          const e = ev.error ?? {};
          throw errorFromCode(e.code ?? "internal", e.message ?? "the build failed", 400);
        }
        await opts.onEvent?.(ev);
      }
    } catch (e) {
      if (e instanceof AgentboxError) throw e;
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
    throw new UnavailableError("the daemon closed the build's stream before it ended");
  }

  /**
   * Lifecycle events as they happen: `for await (const ev of
   * client.events({ signal }))`; subscribed once the first next() has
   * been called. End it with the signal or by leaving the loop.
   */
  async *events(
    opts: CallOptions & { types?: string[]; sandbox?: string; tenant?: string } = {},
  ): AsyncGenerator<LifecycleEvent> {
    const query: Record<string, string | undefined> = {
      type: opts.types?.length ? opts.types.join(",") : undefined,
      sandbox: opts.sandbox,
      tenant: opts.tenant,
    };
    const res = await this.http.open("GET", "/v1/events", {
      query,
      headers: { Accept: "text/event-stream" },
      signal: opts.signal,
    });
    let kind = "";
    let data: string[] = [];
    try {
      for await (const line of lines(res)) {
        if (line === "") {
          const k = kind;
          const payload = data;
          kind = "";
          data = [];
          if (!payload.length || k === "dropped") continue;
          yield JSON.parse(payload.join("\n"));
        } else if (line.startsWith(":")) {
          continue;
        } else if (line.startsWith("event:")) {
          kind = line.slice(6).trim();
        } else if (line.startsWith("data:")) {
          data.push(line.slice(5).replace(/^ /, ""));
        }
      }
    } catch (e) {
      throw transportError(this.http.cfg, e, opts.signal);
    } finally {
      res.destroy();
    }
  }
}
