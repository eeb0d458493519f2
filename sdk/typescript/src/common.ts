/** Request building shared by the classes. */
import { InvalidArgumentError, NotSupportedError } from "./errors.js";

/** A shell string (run by /bin/sh -c) or an argv (run directly). */
export type Command = string | readonly string[];
/** Bytes to send: a string is UTF-8 encoded. */
export type Data = string | Uint8Array;

export const DEFAULT_TEMPLATE = "base";

export function toBuffer(d: Data): Buffer {
  if (typeof d === "string") return Buffer.from(d, "utf8");
  if (d instanceof Uint8Array) return Buffer.from(d.buffer, d.byteOffset, d.byteLength);
  throw new InvalidArgumentError(`data must be a string or bytes, got ${typeof d}`);
}

export function commandFields(cmd: Command): Record<string, unknown> {
  if (typeof cmd === "string") {
    if (!cmd) throw new InvalidArgumentError("the command is empty; pass a shell string or an argv array");
    return { shell: cmd };
  }
  if (!Array.isArray(cmd) || cmd.length === 0 || !cmd.every((a) => typeof a === "string")) {
    throw new InvalidArgumentError("the command must be a non-empty shell string or an array of strings");
  }
  return { cmd: [...cmd] };
}

export interface ProcessSpec {
  /** Environment added to the sandbox's. */
  env?: Record<string, string>;
  /** Working directory inside the sandbox. */
  cwd?: string;
  /** User name or uid to run as. */
  user?: string;
  /** Seconds; the command and all it started are killed then. */
  timeout?: number;
}

export function execBody(cmd: Command, o: ProcessSpec & { stdin?: Data }): Record<string, unknown> {
  const body = commandFields(cmd);
  if (o.env && Object.keys(o.env).length) body.env = { ...o.env };
  if (o.cwd) body.cwd = o.cwd;
  if (o.user) body.user = String(o.user);
  if (o.timeout !== undefined && o.timeout !== null) {
    if (!(o.timeout > 0)) {
      throw new InvalidArgumentError(`timeout must be a positive number of seconds, got ${o.timeout}`);
    }
    body.timeout_ms = Math.max(1, Math.floor(o.timeout * 1000));
  }
  if (o.stdin !== undefined) body.stdin = toBuffer(o.stdin).toString("base64");
  return body;
}

/** A mode for the API: a number (0o600) or an octal string ("0600"). */
export function fileMode(mode: number | string | undefined): string | undefined {
  if (mode === undefined) return undefined;
  let n: number;
  if (typeof mode === "string") {
    let t = mode.trim().toLowerCase();
    if (t.startsWith("0o")) t = t.slice(2);
    if (!/^[0-7]+$/.test(t) || parseInt(t, 8) > 0o7777) {
      throw new InvalidArgumentError(`mode must be a number like 0o600 or an octal string like "0600", got ${JSON.stringify(mode)}`);
    }
    n = parseInt(t, 8);
  } else if (Number.isInteger(mode) && mode >= 0) {
    n = mode;
  } else {
    throw new InvalidArgumentError(`mode must be a number like 0o600 or an octal string like "0600", got ${mode}`);
  }
  return (n & 0o7777).toString(8).padStart(4, "0");
}

export function filePath(path: string): string {
  if (!path) throw new InvalidArgumentError("a path inside the sandbox is required");
  return path;
}

/** "INT", "SIGINT" or 2. */
export function signalName(sig: string | number): string | number {
  if (typeof sig === "number") return sig;
  const s = sig.toUpperCase();
  return s.startsWith("SIG") ? s : "SIG" + s;
}

export function limitsBody(maxConnections = 0, bandwidthMbit = 0): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of [
    ["max_connections", maxConnections],
    ["bandwidth_mbit", bandwidthMbit],
  ] as const) {
    if (!Number.isInteger(v) || v < -1) {
      throw new InvalidArgumentError(`${k} must be a positive number, 0 (keep) or -1 (no limit), got ${v}`);
    }
    if (v) out[k] = v;
  }
  return out;
}

/** http://<port>-<id>.<preview_domain>/, with ?agentbox_token= unless public. */
export function previewUrl(sandboxId: string, network: Record<string, any>, port: number): string {
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    throw new InvalidArgumentError(`port must be 1-65535, got ${port}`);
  }
  const domain = network?.preview_domain;
  if (!domain) {
    throw new NotSupportedError(
      `sandbox ${sandboxId} has no preview settings: the daemon predates preview URLs; ` +
        "upgrade it, or reach the port with exec (curl http://127.0.0.1:PORT) inside the sandbox",
    );
  }
  let u = `http://${port}-${sandboxId}.${domain}/`;
  if (network.preview !== "public" && network.preview_token) {
    u += "?agentbox_token=" + encodeURIComponent(network.preview_token);
  }
  return u;
}
