/** What the API answers (api/openapi.yaml), in TypeScript's casing. */

/** A sandbox's limits, as applied. */
export interface Resources {
  cpu: number;
  memoryMb: number;
  diskMb: number;
  pids: number;
}

/** What the API shows of a sandbox (GET /v1/sandboxes/{id}). */
/** A page of `Sandbox.listPage`: `nextCursor` is null on the last one. */
export interface SandboxPage {
  sandboxes: SandboxInfo[];
  nextCursor: string | null;
}

export interface SandboxInfo {
  id: string;
  state: string;
  template: string;
  templateVersion: string;
  isolation: string;
  resources: Resources;
  env: Record<string, string>;
  metadata: Record<string, string>;
  createdAt?: Date;
  expiresAt?: Date;
  error: string;
  /** Egress policy and preview access, as the API sent it (docs/network.md). */
  network: Record<string, any>;
  oomKills: number;
  lastOomAt?: Date;
  /** Per-user kernel counts as applied (keys as the API's). */
  userLimits: UserLimits;
  /** The node_id of the fleet node that runs it ("" without one; docs/cluster.md). */
  node: string;
}

/** Per-user kernel counts of a sandbox's processes (docs/SECURITY.md). */
export interface UserLimits {
  inotify_instances?: number;
  inotify_watches?: number;
  msgqueue_bytes?: number;
  sigpending?: number;
}

/** One file inside a sandbox; `mode` is octal, e.g. "0644". */
export interface FileInfo {
  name: string;
  path: string;
  type: "file" | "dir" | "symlink" | "other" | string;
  size: number;
  mode: string;
  mtime?: Date;
  target: string;
  uid: number;
  gid: number;
}

/**
 * A command that ran to its end. A failed command is not an error: look at
 * `exitCode`, `signal`, `timedOut` (killed at its timeout, exit code 137)
 * and `oomKilled`. `stdout`/`stderr` are text (invalid UTF-8 replaced);
 * `stdoutBytes`/`stderrBytes` the exact bytes.
 */
export interface ExecResult {
  stdout: string;
  stderr: string;
  exitCode: number;
  signal: string;
  timedOut: boolean;
  truncated: boolean;
  durationMs: number;
  oomKilled: boolean;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
}

/** A template sandboxes are created from. */
export interface Template {
  name: string;
  version: string;
  user: string;
  workdir: string;
  env: Record<string, string>;
  sizeBytes: number;
  createdAt?: Date;
  tenant: string;
  from: string;
  layers: string[];
  start: string;
  ready?: Record<string, any>;
  versions: string[];
}

/** The daemon's status (GET /v1/health). */
export interface Health {
  status: string;
  version: string;
  drivers: string[];
  sandboxes: number;
}

/** A warm pool (GET /v1/pools). */
export interface PoolStatus {
  /** Through a fleet gateway: the node that keeps the pool ("" on a node). */
  node: string;
  template: string;
  isolation: string;
  size: number;
  ready: number;
  resources: Resources;
  egress: string;
  served: number;
  misses: number;
  booted: number;
  failures: number;
  lastError: string;
}

/** A background process; `exitCode` and `signal` once it ended. */
export interface ProcessInfo {
  pid: number;
  tag: string;
  cmd: string[];
  state: string;
  exitCode?: number;
  signal: string;
  timedOut: boolean;
  oomKilled: boolean;
  startedAt?: Date;
  endedAt?: Date;
}

/** A background process's output from the offsets asked for. */
export interface ProcessOutput {
  stdout: string;
  stderr: string;
  stdoutBytes: Buffer;
  stderrBytes: Buffer;
  stdoutOffset: number;
  stderrOffset: number;
  state: string;
  exitCode?: number;
  stdoutDropped: number;
  stderrDropped: number;
}

/** A saved state of a sandbox; `raw` holds every field the API sent. */
export interface Snapshot {
  id: string;
  name: string;
  sandboxId: string;
  createdAt?: Date;
  sizeBytes: number;
  /** Processes and memory were saved too (gvisor tier). */
  memory: boolean;
  raw: Record<string, any>;
}

/** A template or snapshot pushed to an OCI registry: the ref pushed to and
 * the manifest digest, which names the same bytes at any registry. */
export interface PushResult {
  ref: string;
  digest: string;
}

/** An isolation tier as GET /v1/info and GET /v1/node show it. */
export interface TierInfo {
  name: string;
  available: boolean;
  default: boolean;
  /** Why an unavailable tier does not run here. */
  error: string;
}

/** A node's status as a fleet gateway polls it (GET /v1/node; docs/cluster.md). */
export interface NodeStatus {
  nodeId: string;
  version: string;
  tiers: TierInfo[];
  /** Sandboxes with a running init. */
  sandboxes: number;
  cpus: number;
  load1: number;
  memoryTotalMb: number;
  memoryAvailableMb: number;
  /** Names of the templates ready on the node. */
  templates: string[];
  draining: boolean;
}

/** One node of a fleet gateway's membership (GET /v1/fleet/nodes). */
export interface FleetNode {
  id: string;
  url: string;
  /** Where the gateway learned of the node: "config" or "kubernetes". */
  source: string;
  /** For a node from Kubernetes: why its Lease holds it down ("" while renewed). */
  lease: string;
  /** The last poll succeeded, no request has failed to connect since, and its Lease (if any) is renewed. */
  available: boolean;
  /** On an unavailable node: the sandboxes it ran at its last successful poll. */
  lostSandboxes: number;
  lastError: string;
  lastPoll?: Date;
  /** Creates sent to the node and not answered yet. */
  inFlight: number;
  /** The node's last GET /v1/node answer; undefined before the first. */
  status?: NodeStatus;
}

type Json = Record<string, any>;

export function time(v: unknown): Date | undefined {
  if (typeof v !== "string" || !v) return undefined;
  const d = new Date(v);
  return isNaN(d.getTime()) ? undefined : d;
}

const b64 = (v: unknown): Buffer => (typeof v === "string" && v ? Buffer.from(v, "base64") : Buffer.alloc(0));

export function resources(d: Json | undefined): Resources {
  d ??= {};
  return { cpu: Number(d.cpu ?? 0), memoryMb: d.memory_mb ?? 0, diskMb: d.disk_mb ?? 0, pids: d.pids ?? 0 };
}

export function sandboxInfo(d: Json): SandboxInfo {
  return {
    id: d.id,
    state: d.state ?? "",
    template: d.template ?? "",
    templateVersion: d.template_version ?? "",
    isolation: d.isolation ?? "",
    resources: resources(d.resources),
    env: d.env ?? {},
    metadata: d.metadata ?? {},
    createdAt: time(d.created_at),
    expiresAt: time(d.expires_at),
    error: d.error ?? "",
    network: d.network ?? {},
    oomKills: d.oom_kills ?? 0,
    lastOomAt: time(d.last_oom_at),
    userLimits: d.user_limits ?? {},
    node: d.node ?? "",
  };
}

export function fileInfo(d: Json): FileInfo {
  return {
    name: d.name ?? "",
    path: d.path ?? "",
    type: d.type ?? "",
    size: d.size ?? 0,
    mode: d.mode ?? "",
    mtime: time(d.mtime),
    target: d.target ?? "",
    uid: d.uid ?? 0,
    gid: d.gid ?? 0,
  };
}

export function execResult(d: Json): ExecResult {
  const raw = d.encoding === "base64";
  const out = raw ? b64(d.stdout) : Buffer.from(d.stdout ?? "");
  const err = raw ? b64(d.stderr) : Buffer.from(d.stderr ?? "");
  return execResultOf(out, err, d);
}

export function execResultOf(out: Buffer, err: Buffer, d: Json): ExecResult {
  return {
    stdout: out.toString("utf8"),
    stderr: err.toString("utf8"),
    exitCode: d.exit_code ?? 0,
    signal: d.signal ?? "",
    timedOut: !!d.timed_out,
    truncated: !!d.truncated,
    durationMs: d.duration_ms ?? 0,
    oomKilled: !!d.oom_killed,
    stdoutBytes: out,
    stderrBytes: err,
  };
}

export function template(d: Json): Template {
  return {
    name: d.name,
    version: d.version ?? "",
    user: d.user ?? "",
    workdir: d.workdir ?? "",
    env: d.env ?? {},
    sizeBytes: d.size_bytes ?? 0,
    createdAt: time(d.created_at),
    tenant: d.tenant ?? "",
    from: d.from ?? "",
    layers: d.layers ?? [],
    start: d.start ?? "",
    ready: d.ready ?? undefined,
    versions: d.versions ?? [],
  };
}

export function health(d: Json): Health {
  return { status: d.status ?? "", version: d.version ?? "", drivers: d.drivers ?? [], sandboxes: d.sandboxes ?? 0 };
}

export function poolStatus(d: Json): PoolStatus {
  return {
    node: d.node ?? "",
    template: d.template ?? "",
    isolation: d.isolation ?? "",
    size: d.size ?? 0,
    ready: d.ready ?? 0,
    resources: resources(d.resources),
    egress: d.egress ?? "none",
    served: d.served ?? 0,
    misses: d.misses ?? 0,
    booted: d.booted ?? 0,
    failures: d.failures ?? 0,
    lastError: d.last_error ?? "",
  };
}

export function processInfo(d: Json): ProcessInfo {
  const cmd = d.cmd ?? [];
  return {
    pid: d.pid ?? 0,
    tag: d.tag ?? "",
    cmd: typeof cmd === "string" ? [cmd] : cmd,
    state: d.state ?? "",
    exitCode: d.exit_code ?? undefined,
    signal: String(d.signal ?? ""),
    timedOut: !!d.timed_out,
    oomKilled: !!d.oom_killed,
    startedAt: time(d.started_at),
    endedAt: time(d.ended_at),
  };
}

export function processOutput(d: Json): ProcessOutput {
  const out = b64(d.stdout);
  const err = b64(d.stderr);
  return {
    stdout: out.toString("utf8"),
    stderr: err.toString("utf8"),
    stdoutBytes: out,
    stderrBytes: err,
    stdoutOffset: d.stdout_offset ?? 0,
    stderrOffset: d.stderr_offset ?? 0,
    state: d.state ?? "",
    exitCode: d.exit_code ?? undefined,
    stdoutDropped: d.stdout_dropped ?? 0,
    stderrDropped: d.stderr_dropped ?? 0,
  };
}

export function snapshot(d: Json): Snapshot {
  return {
    id: d.id,
    name: d.name ?? "",
    sandboxId: d.sandbox_id ?? "",
    createdAt: time(d.created_at),
    sizeBytes: d.size_bytes ?? 0,
    memory: !!d.memory,
    raw: d,
  };
}

export function pushResult(d: Json): PushResult {
  return { ref: d?.ref ?? "", digest: d?.digest ?? "" };
}

export function nodeStatus(d: Json | undefined): NodeStatus {
  d ??= {};
  return {
    nodeId: d.node_id ?? "",
    version: d.version ?? "",
    tiers: (d.tiers ?? []).map((t: Json) => ({
      name: t.name ?? "",
      available: !!t.available,
      default: !!t.default,
      error: t.error ?? "",
    })),
    sandboxes: d.sandboxes ?? 0,
    cpus: d.cpus ?? 0,
    load1: Number(d.load1 ?? 0),
    memoryTotalMb: d.memory_total_mb ?? 0,
    memoryAvailableMb: d.memory_available_mb ?? 0,
    templates: d.templates ?? [],
    draining: !!d.draining,
  };
}

export function fleetNode(d: Json): FleetNode {
  return {
    id: d.id ?? "",
    url: d.url ?? "",
    source: d.source ?? "",
    lease: d.lease ?? "",
    available: !!d.available,
    lostSandboxes: d.lost_sandboxes ?? 0,
    lastError: d.last_error ?? "",
    lastPoll: time(d.last_poll),
    inFlight: d.in_flight ?? 0,
    status: d.status ? nodeStatus(d.status) : undefined,
  };
}
