/**
 * agentbox: the TypeScript SDK of agentbox, self-hosted disposable Linux
 * sandboxes for AI agents (docs/sdk-typescript.md).
 */
export { Sandbox, Files, Process, Pty, Client } from "./sandbox.js";
export type {
  CreateOptions,
  ExecOptions,
  ExecEvent,
  StartOptions,
  PtyOptions,
  WriteOptions,
  EgressOptions,
  RunCodeCallbacks,
  LifecycleEvent,
  CallOptions,
} from "./sandbox.js";
export * from "./errors.js";
export * from "./models.js";
export { Execution, Result } from "./code.js";
export { Desktop } from "./desktop.js";
export type { ActionsResult, DesktopAction, DesktopInfo, Point, Screenshot, ScreenshotOptions, Window } from "./desktop.js";
export type { CodeContext, CodeEvent, ContextRef, ExecutionError, RunCodeOptions } from "./code.js";
export type { Command, Data, ProcessSpec } from "./common.js";
export { resolveConfig, parseHost } from "./config.js";
export type { Config, ConnectionOptions } from "./config.js";
