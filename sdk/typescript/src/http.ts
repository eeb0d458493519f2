/**
 * The HTTP layer: node:http (a unix socket or TCP) or node:https, no
 * dependencies; every request takes an AbortSignal, and a non-2xx answer
 * throws the typed error it names.
 */
import * as http from "node:http";
import * as https from "node:https";
import { Readable } from "node:stream";
import { ENV_API_KEY, ENV_HOST, type Config } from "./config.js";
import { AgentboxError, InternalError, InvalidArgumentError, UnavailableError, errorFromCode, errorFromStatus } from "./errors.js";

export const USER_AGENT = "agentbox-typescript";

/** What a request may carry. */
export type RequestBody = string | Uint8Array | AsyncIterable<Uint8Array> | Iterable<Uint8Array>;

export interface RequestOptions {
  query?: Record<string, string | number | boolean | undefined>;
  json?: unknown;
  body?: RequestBody;
  contentType?: string;
  headers?: Record<string, string>;
  signal?: AbortSignal;
}

/** Every call takes these. */
export interface CallOptions {
  /** Aborts the call: it rejects with the signal's reason. */
  signal?: AbortSignal;
}

/** Throw the signal's reason when it has fired. */
export function throwIfAborted(signal?: AbortSignal): void {
  if (signal?.aborted) throw signal.reason ?? abortError();
}

function abortError(): Error {
  const e = new Error("the operation was aborted");
  e.name = "AbortError";
  return e;
}

/** Turn a request failure into the error the caller sees. */
export function transportError(cfg: Config, e: unknown, signal?: AbortSignal): unknown {
  if (signal?.aborted) return signal.reason ?? abortError();
  if (e instanceof AgentboxError) return e;
  const msg = e instanceof Error ? e.message : String(e);
  return new UnavailableError(
    `cannot reach the agentbox daemon at ${cfg.host} (${msg}); is \`agentbox serve\` running? Set ${ENV_HOST} to its address`,
  );
}

/** Turn a non-2xx answer into the typed error it names. */
export function apiError(cfg: Config, status: number, body: Buffer): AgentboxError {
  let err: AgentboxError;
  try {
    const e = JSON.parse(body.toString("utf8")).error;
    if (typeof e?.code !== "string") throw new Error("no error code");
    err = errorFromCode(e.code, e.message ?? "", status);
  } catch {
    const text = body.toString("utf8").trim() || http.STATUS_CODES[status] || "";
    err = errorFromStatus(status, `agentbox daemon answered ${status}: ${text}`);
  }
  if (status === 401 && !cfg.apiKey) {
    err.message += ` (no API key is set: set ${ENV_API_KEY} or pass apiKey)`;
  }
  return err;
}

export async function readAll(r: AsyncIterable<Buffer | string>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const c of r) parts.push(typeof c === "string" ? Buffer.from(c) : c);
  return Buffer.concat(parts);
}

/** The complete lines of a byte stream, as they arrive. */
export async function* lines(r: AsyncIterable<Buffer>): AsyncGenerator<string> {
  let pending: Buffer = Buffer.alloc(0);
  for await (const chunk of r) {
    pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
    let i: number;
    while ((i = pending.indexOf(10)) >= 0) {
      const line = pending.subarray(0, i).toString("utf8").replace(/\r$/, "");
      pending = pending.subarray(i + 1);
      yield line;
    }
  }
  if (pending.length) yield pending.toString("utf8");
}

/** Requests to one daemon. */
export class Http {
  constructor(readonly cfg: Config) {}

  /** The request options of node:http for method and path. */
  requestOptions(method: string, path: string, query?: RequestOptions["query"]): {
    mod: typeof http | typeof https;
    options: http.RequestOptions;
  } {
    const u = new URL(this.cfg.baseUrl + path);
    for (const [k, v] of Object.entries(query ?? {})) {
      if (v !== undefined) u.searchParams.set(k, String(v));
    }
    const headers: Record<string, string> = { "User-Agent": USER_AGENT, Accept: "application/json" };
    if (this.cfg.apiKey) headers.Authorization = "Bearer " + this.cfg.apiKey;
    const options: http.RequestOptions = {
      method,
      path: u.pathname + u.search,
      headers,
    };
    if (this.cfg.socket) {
      options.socketPath = this.cfg.socket;
      options.host = "agentbox";
    } else {
      options.hostname = u.hostname.replace(/^\[|\]$/g, "");
      options.port = u.port || undefined;
    }
    return { mod: u.protocol === "https:" ? https : http, options };
  }

  /**
   * Send a request and resolve with the response, its body unread; a
   * non-2xx answer rejects with its typed error.
   */
  open(method: string, path: string, opts: RequestOptions = {}): Promise<http.IncomingMessage> {
    const { signal } = opts;
    throwIfAborted(signal);
    const { mod, options } = this.requestOptions(method, path, opts.query);
    const headers = options.headers as Record<string, string>;
    Object.assign(headers, opts.headers);
    let body = opts.body;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers["Content-Type"] = "application/json";
    }
    if (opts.contentType) headers["Content-Type"] = opts.contentType;
    if (typeof body === "string" || body instanceof Uint8Array) {
      headers["Content-Length"] = String(Buffer.byteLength(body));
    } else if (body === undefined && method !== "GET" && method !== "HEAD") {
      headers["Content-Length"] = "0";
    }
    options.signal = signal;
    return new Promise((resolve, reject) => {
      const req = mod.request(options, (res) => {
        const status = res.statusCode ?? 0;
        if (status >= 200 && status < 300) {
          resolve(res);
          return;
        }
        readAll(res).then(
          (b) => reject(apiError(this.cfg, status, b)),
          (e) => reject(transportError(this.cfg, e, signal)),
        );
      });
      req.on("error", (e) => reject(transportError(this.cfg, e, signal)));
      req.on("socket", (sock) => {
        if (!sock.connecting) return;
        const t = setTimeout(() => {
          req.destroy(new UnavailableError(`connecting to the agentbox daemon at ${this.cfg.host} took over ${this.cfg.connectTimeoutMs} ms`));
        }, this.cfg.connectTimeoutMs);
        sock.once("connect", () => clearTimeout(t));
        sock.once("close", () => clearTimeout(t));
      });
      if (body === undefined) {
        req.end();
      } else if (typeof body === "string" || body instanceof Uint8Array) {
        req.end(body);
      } else {
        const src = Readable.from(body as AsyncIterable<Uint8Array>, { objectMode: false });
        src.on("error", (e) => req.destroy(e));
        src.pipe(req);
      }
    });
  }

  /** The answer's body as bytes. */
  async bytes(method: string, path: string, opts: RequestOptions = {}): Promise<Buffer> {
    const res = await this.open(method, path, opts);
    try {
      return await readAll(res);
    } catch (e) {
      throw transportError(this.cfg, e, opts.signal);
    }
  }

  /** The answer's body decoded as JSON (undefined for an empty body). */
  async json<T = any>(method: string, path: string, opts: RequestOptions = {}): Promise<T> {
    const b = await this.bytes(method, path, opts);
    if (b.length === 0) return undefined as T;
    try {
      return JSON.parse(b.toString("utf8")) as T;
    } catch (e) {
      throw new InternalError(`decoding the answer to ${method} ${path}: ${(e as Error).message}`);
    }
  }

  /** Send a request and drop the answer's body. */
  async send(method: string, path: string, opts: RequestOptions = {}): Promise<void> {
    await this.bytes(method, path, opts);
  }
}

/** /v1/sandboxes/{id}{rest}, the id checked and escaped. */
export function sandboxPath(sandboxId: string, rest = ""): string {
  if (!sandboxId) throw new InvalidArgumentError("a sandbox id is required");
  return "/v1/sandboxes/" + encodeURIComponent(sandboxId) + rest;
}
