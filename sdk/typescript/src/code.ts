/**
 * The code interpreter: stateful Jupyter kernels in the sandbox
 * (docs/interpreter.md). `sbx.runCode()` folds a cell's events into an
 * Execution; `sbx.runCodeStream()` yields them as they come.
 */
import { InvalidArgumentError } from "./errors.js";

const FORMATS = ["text", "html", "markdown", "svg", "png", "jpeg", "pdf", "latex", "json", "javascript"] as const;
export type ResultFormat = (typeof FORMATS)[number];

/**
 * One rich output of a cell: its value (`isMainResult`) or something it
 * displayed. Each MIME type the kernel gave has its field (png, jpeg and
 * pdf as base64); others are in `extra`.
 */
export class Result {
  isMainResult = false;
  text?: string;
  html?: string;
  markdown?: string;
  svg?: string;
  png?: string;
  jpeg?: string;
  pdf?: string;
  latex?: string;
  json?: unknown;
  javascript?: string;
  extra: Record<string, unknown> = {};
  executionCount?: number;

  static fromJSON(d: Record<string, any>): Result {
    const r = new Result();
    r.isMainResult = !!d.is_main_result;
    r.extra = { ...(d.extra ?? {}) };
    r.executionCount = d.execution_count ?? undefined;
    for (const f of FORMATS) {
      if (d[f] !== undefined && d[f] !== null) (r as any)[f] = d[f];
    }
    return r;
  }

  /** The formats this result has ("text", "png", ...), then extra's MIME types. */
  formats(): string[] {
    return [...FORMATS.filter((f) => (this as any)[f] !== undefined), ...Object.keys(this.extra)];
  }
}

/** An exception raised by the code (not an API failure). */
export interface ExecutionError {
  name: string;
  value: string;
  traceback: string;
}

/** The whole of one run; `restarted`: the kernel was restarted, state lost. */
export class Execution {
  results: Result[] = [];
  logs: { stdout: string[]; stderr: string[] } = { stdout: [], stderr: [] };
  error?: ExecutionError;
  executionCount?: number;
  status = "";
  durationMs = 0;
  restarted = false;
  context = "";

  /** The text of the main result (the cell's value), if any. */
  get text(): string | undefined {
    return this.results.find((r) => r.isMainResult)?.text;
  }
}

/** A code context: a kernel with its own state. */
export interface CodeContext {
  id: string;
  language: string;
  kernel: string;
  cwd: string;
  user: string;
  state: string;
  pid: number;
  executionCount: number;
  startedAt: string;
  restarts: number;
  lastExit: string;
}

export function codeContext(d: Record<string, any>): CodeContext {
  return {
    id: d.id ?? "",
    language: d.language ?? "",
    kernel: d.kernel ?? "",
    cwd: d.cwd ?? "",
    user: d.user ?? "",
    state: d.state ?? "",
    pid: d.pid ?? 0,
    executionCount: d.execution_count ?? 0,
    startedAt: d.started_at ?? "",
    restarts: d.restarts ?? 0,
    lastExit: d.last_exit ?? "",
  };
}

/** A context or its id. */
export type ContextRef = string | CodeContext;

/** One event of a running cell, as runCodeStream yields it. */
export type CodeEvent =
  | { type: "stdout" | "stderr"; text: string }
  | { type: "result"; result: Result }
  | { type: "error"; error: ExecutionError }
  | { type: "end"; execution: Execution };

export function contextId(ctx: ContextRef): string {
  const id = typeof ctx === "string" ? ctx : ctx?.id;
  if (!id) throw new InvalidArgumentError("a code context (or its id) is required");
  return encodeURIComponent(id);
}

export interface RunCodeOptions {
  /** "python" (default when no context is given), "javascript", ... */
  language?: string;
  /** The context to run in; default: the language's default context. */
  context?: ContextRef;
  env?: Record<string, string>;
  /** Seconds (default 300; 0 for none): the kernel is interrupted then. */
  timeout?: number;
}

export function runBody(code: string, o: RunCodeOptions): Record<string, unknown> {
  if (o.language && o.context) {
    throw new InvalidArgumentError("give language or context, not both: a context has its language");
  }
  const body: Record<string, unknown> = { code };
  if (o.context) body.context = typeof o.context === "string" ? o.context : o.context.id;
  if (o.language) body.language = o.language;
  if (o.env && Object.keys(o.env).length) body.env = o.env;
  if (o.timeout !== undefined) body.timeout_ms = o.timeout <= 0 ? -1 : Math.max(1, Math.floor(o.timeout * 1000));
  return body;
}

/** Fold one NDJSON event into ex; the event to yield, if any. */
export function foldCodeEvent(ex: Execution, ev: Record<string, any>): { event?: CodeEvent; done: boolean } {
  switch (ev.type) {
    case "stdout":
    case "stderr": {
      const text = ev.text ?? "";
      ex.logs[ev.type as "stdout" | "stderr"].push(text);
      return { event: { type: ev.type, text }, done: false };
    }
    case "result": {
      const result = Result.fromJSON(ev);
      ex.results.push(result);
      return { event: { type: "result", result }, done: false };
    }
    case "error": {
      const error = { name: ev.name ?? "", value: ev.value ?? "", traceback: ev.traceback ?? "" };
      ex.error = error;
      return { event: { type: "error", error }, done: false };
    }
    case "number_of_executions":
      ex.executionCount = ev.execution_count;
      return { done: false };
    case "end_of_execution":
      ex.status = ev.status ?? "";
      ex.durationMs = ev.duration_ms ?? 0;
      ex.restarted = !!ev.restarted;
      ex.context = ev.context ?? "";
      if (ev.execution_count) ex.executionCount = ev.execution_count;
      return { event: { type: "end", execution: ex }, done: true };
    default:
      return { done: false };
  }
}
