/**
 * Typed errors of the agentbox SDK.
 *
 * Every error the daemon answers carries a stable code (`not_found`,
 * `invalid_argument`, ...) and a message that says what was wrong and what
 * to do. The SDK throws the class that matches the code; each keeps the
 * `code`, the `message` and the HTTP `status` it came with. A call whose
 * AbortSignal fires rejects with the signal's reason instead (by default a
 * DOMException named "AbortError"), as Node's own APIs do.
 */

/** The API's error codes (errdefs/errdefs.go). */
export type ErrorCode =
  | "not_found"
  | "invalid_argument"
  | "unauthenticated"
  | "permission_denied"
  | "deadline_exceeded"
  | "failed_precondition"
  | "already_exists"
  | "resource_exhausted"
  | "unavailable"
  | "node_unavailable"
  | "internal"
  | "unimplemented"
  | (string & {});

/** Base class of every error the SDK throws. */
export class AgentboxError extends Error {
  /** The API's stable error code, e.g. "not_found". */
  readonly code: ErrorCode;
  /** The HTTP status of the answer; undefined when none came. */
  readonly status?: number;
  static readonly defaultCode: ErrorCode = "internal";

  constructor(message: string, code?: ErrorCode, status?: number) {
    super(message);
    this.name = new.target.name;
    this.code = code ?? (new.target as typeof AgentboxError).defaultCode;
    this.status = status;
  }
}

/** The sandbox, file, template, process or route does not exist. */
export class NotFoundError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "not_found";
}
/** A request was malformed or a value out of range. */
export class InvalidArgumentError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "invalid_argument";
}
/** The API key is missing or wrong (`unauthenticated`). */
export class UnauthorizedError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "unauthenticated";
}
/** The key may not do this, e.g. an admin-only route. */
export class PermissionDeniedError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "permission_denied";
}
/**
 * A deadline passed (`deadline_exceeded`): the daemon gave up, or a process
 * did not end within `Process.wait({ timeout })`. A command run by
 * `exec(cmd, { timeout })` that runs too long is killed and is not an
 * error: its result has `timedOut: true`.
 */
export class TimeoutError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "deadline_exceeded";
}
/** The thing is in the wrong state for this, or already exists. */
export class ConflictError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "failed_precondition";
}
/** A quota or limit was reached. */
export class ResourceExhaustedError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "resource_exhausted";
}
/** The daemon or the sandbox cannot be reached right now. */
export class UnavailableError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "unavailable";
}
/** The daemon failed in a way it did not expect. */
export class InternalError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "internal";
}
/** The capability has not landed in agentbox (`unimplemented`). */
export class NotSupportedError extends AgentboxError {
  static override readonly defaultCode: ErrorCode = "unimplemented";
}

const byCode: Record<string, typeof AgentboxError> = {
  not_found: NotFoundError,
  invalid_argument: InvalidArgumentError,
  unauthenticated: UnauthorizedError,
  permission_denied: PermissionDeniedError,
  deadline_exceeded: TimeoutError,
  failed_precondition: ConflictError,
  already_exists: ConflictError,
  resource_exhausted: ResourceExhaustedError,
  unavailable: UnavailableError,
  node_unavailable: UnavailableError,
  internal: InternalError,
  unimplemented: NotSupportedError,
};

const byStatus: Record<number, ErrorCode> = {
  400: "invalid_argument",
  401: "unauthenticated",
  403: "permission_denied",
  404: "not_found",
  409: "failed_precondition",
  413: "invalid_argument",
  422: "invalid_argument",
  429: "resource_exhausted",
  502: "unavailable",
  503: "unavailable",
  504: "deadline_exceeded",
};

/** The typed error of an API error code (unknown codes: InternalError). */
export function errorFromCode(code: ErrorCode, message: string, status?: number): AgentboxError {
  const cls = byCode[code] ?? InternalError;
  return new cls(message, code, status);
}

/** The typed error of an answer that carries no API error body. */
export function errorFromStatus(status: number, message: string): AgentboxError {
  return errorFromCode(byStatus[status] ?? "internal", message, status);
}
