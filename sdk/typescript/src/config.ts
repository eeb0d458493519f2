/**
 * Where the daemon is and which key to send, resolved like the Go and
 * Python SDKs: options win over AGENTBOX_HOST / AGENTBOX_API_KEY; as root
 * with neither set, the local unix socket and the admin key file.
 */
import { readFileSync, statSync } from "node:fs";
import { isIP } from "node:net";
import { InvalidArgumentError, PermissionDeniedError } from "./errors.js";

export const DEFAULT_SOCKET_PATH = "/run/agentbox/agentbox.sock";
export const DEFAULT_HTTP_HOST = "http://127.0.0.1:7423";
export const DEFAULT_ADMIN_KEY_PATH = "/var/lib/agentbox/admin.key";
export const ENV_HOST = "AGENTBOX_HOST";
export const ENV_API_KEY = "AGENTBOX_API_KEY";

/** How to reach a daemon: every class's options extend it. */
export interface ConnectionOptions {
  /** The API key; default AGENTBOX_API_KEY (as root: the admin key). */
  apiKey?: string;
  /**
   * The daemon: "unix:///run/agentbox/agentbox.sock", "http://host:port"
   * or "host:port"; default AGENTBOX_HOST (as root: the local socket).
   */
  baseUrl?: string;
  /** Milliseconds a connection may take to open (default 10 000). */
  connectTimeoutMs?: number;
}

/** A resolved connection. */
export interface Config {
  /** Origin and path prefix for requests ("http://agentbox" on a socket). */
  baseUrl: string;
  /** The unix socket's path, or undefined for TCP. */
  socket?: string;
  /** The host as the user named it, for messages. */
  host: string;
  apiKey: string;
  connectTimeoutMs: number;
}

/** Turn a host setting into a base URL and a unix socket path. */
export function parseHost(host: string): { baseUrl: string; socket?: string } {
  host = host.trim();
  if (host.startsWith("unix://")) {
    const path = host.slice("unix://".length);
    if (!path.startsWith("/")) {
      throw new InvalidArgumentError(
        `${ENV_HOST}: a unix socket host wants an absolute path, like ` +
          `unix:///run/agentbox/agentbox.sock, got ${JSON.stringify(host)}`,
      );
    }
    return { baseUrl: "http://agentbox", socket: path };
  }
  if (host.startsWith("tcp://")) {
    host = "http://" + host.slice("tcp://".length);
  } else if (host.includes("://") && !/^https?:\/\//.test(host)) {
    throw new InvalidArgumentError(
      `${ENV_HOST}: unsupported scheme in ${JSON.stringify(host)}; use unix://, http://, https:// or host:port`,
    );
  } else if (!host.includes("://")) {
    host = "http://" + host;
  }
  let u: URL;
  try {
    u = new URL(host);
  } catch {
    throw new InvalidArgumentError(
      `${ENV_HOST}: cannot parse ${JSON.stringify(host)} as an address; use unix:///path, http://host:port or host:port`,
    );
  }
  if (!u.host) {
    throw new InvalidArgumentError(`${ENV_HOST}: ${JSON.stringify(host)} names no host`);
  }
  return { baseUrl: (u.origin + u.pathname).replace(/\/+$/, "") };
}

function isLoopback(baseUrl: string): boolean {
  const h = new URL(baseUrl).hostname.replace(/^\[|\]$/g, "");
  if (h === "localhost") return true;
  if (isIP(h) === 4) return h.startsWith("127.");
  if (isIP(h) === 6) return h === "::1";
  return false;
}

function isSocket(path: string): boolean {
  try {
    return statSync(path).isSocket();
  } catch {
    return false;
  }
}

/**
 * Resolve the daemon's address and the API key. AGENTBOX_API_KEY set but
 * empty throws InvalidArgumentError: it never falls back to the admin key.
 */
export function resolveConfig(
  opts: ConnectionOptions = {},
  paths: { socket?: string; adminKey?: string } = {},
): Config {
  const socketPath = paths.socket ?? DEFAULT_SOCKET_PATH;
  const adminKeyPath = paths.adminKey ?? DEFAULT_ADMIN_KEY_PATH;
  let host = opts.baseUrl || process.env[ENV_HOST] || "";
  let key = opts.apiKey;
  if (key === undefined) {
    const env = process.env[ENV_API_KEY];
    if (env !== undefined && env.trim() === "") {
      throw new InvalidArgumentError(
        `${ENV_API_KEY} is set but empty (did the command that made the key fail?); ` +
          "set it to an API key, or unset it to use the admin key as root on the daemon's host",
      );
    }
    key = env ?? "";
  }
  const root = typeof process.geteuid === "function" && process.geteuid() === 0;
  if (!host) {
    host = root && isSocket(socketPath) ? "unix://" + socketPath : DEFAULT_HTTP_HOST;
  }
  const { baseUrl, socket } = parseHost(host);
  if (!key && root && adminKeyPath && (socket || isLoopback(baseUrl))) {
    try {
      key = readFileSync(adminKeyPath, "utf8").trim();
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "ENOENT") {
        throw new PermissionDeniedError(`reading admin key ${adminKeyPath}: ${(e as Error).message}`);
      }
    }
  }
  return { baseUrl, socket, host, apiKey: key, connectTimeoutMs: opts.connectTimeoutMs ?? 10_000 };
}
