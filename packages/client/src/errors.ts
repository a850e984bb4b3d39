/**
 * The errors the client throws: one class per failure, all {@link ApiError}s, each carrying the HTTP status (0 when no
 * answer came), the service's `code`, the request id and whether sending the same request again may succeed.
 */

/** What every error of the client carries. */
export type ApiErrorFields = {
  /** HTTP status; 0 when no answer came (connection failed, timed out). */
  status: number;
  /** Error family: invalid_request_error, authentication_error, permission_error, rate_limit_error, api_error. */
  type: string;
  /** Machine-readable code, e.g. `invalid_parameter`, `rate_limited`, `unavailable`, `timeout`. */
  code: string;
  /** The parameter at fault, when one is. */
  param?: string;
  /** The request's id (`X-Request-Id`), to quote in support requests. */
  requestId?: string;
  /** The whole `error` object of the answer (some errors carry more fields, e.g. `indexed` on a 502). */
  body?: Record<string, unknown>;
  /** Seconds the service asked to wait (`Retry-After`), when it did. */
  retryAfterSeconds?: number;
};

/** Base class of every error the client throws; `instanceof ApiError` catches them all. */
export class ApiError extends Error {
  override name = "ApiError";
  /** HTTP status; 0 when no answer came. */
  readonly status: number;
  /** Error family (the envelope's `type`). */
  readonly type: string;
  /** Machine-readable code (the envelope's `code`, or `http_<status>` for an answer without one). */
  readonly code: string;
  /** The parameter at fault, when one is. */
  readonly param: string | undefined;
  /** The request's id (`X-Request-Id`), to quote in support requests. */
  readonly requestId: string | undefined;
  /** The whole `error` object. */
  readonly body: Record<string, unknown>;
  /** Seconds the service asked to wait before a retry, when it said. */
  readonly retryAfterSeconds: number | undefined;

  constructor(message: string, fields: ApiErrorFields, options?: { cause?: unknown }) {
    super(message, options);
    this.status = fields.status;
    this.type = fields.type;
    this.code = fields.code;
    this.param = fields.param;
    this.requestId = fields.requestId;
    this.body = fields.body ?? {};
    this.retryAfterSeconds = fields.retryAfterSeconds;
  }

  /** Whether sending the same request again may succeed (429, 409 `idempotency_key_in_use`, 5xx, no answer). */
  get retryable(): boolean {
    return (
      this.status === 0 ||
      this.status === 429 ||
      this.status >= 500 ||
      (this.status === 409 && this.code === "idempotency_key_in_use")
    );
  }

  /** The error of a non-2xx response (its body is read): the subclass of its status, with the service's envelope. */
  static async from(res: Response): Promise<ApiError> {
    const headerId = res.headers.get("x-request-id") ?? undefined;
    let error: Record<string, unknown> = {};
    try {
      const body = (await res.json()) as { error?: unknown };
      if (body && typeof body.error === "object" && body.error !== null) error = body.error as Record<string, unknown>;
    } catch {
      // Not JSON (a proxy's error page): the status says enough.
    }
    const str = (v: unknown) => (typeof v === "string" ? v : undefined);
    const retryAfter = Number(res.headers.get("retry-after") ?? Number.NaN);
    const fields: ApiErrorFields = {
      status: res.status,
      type: str(error.type) ?? (res.status >= 500 ? "api_error" : "invalid_request_error"),
      code: str(error.code) ?? `http_${res.status}`,
      param: str(error.param),
      requestId: str(error.request_id) ?? headerId,
      body: error,
      retryAfterSeconds: Number.isFinite(retryAfter) ? retryAfter : undefined,
    };
    const message = str(error.message) ?? `HTTP ${res.status}`;
    const Class = errorClassOf(res.status, fields.code);
    return new Class(message, fields);
  }
}

/** 400, 404, 413 and other 4xx: the request is wrong (`param` names the field); sending it again fails the same. */
export class InvalidRequestError extends ApiError {
  override name = "InvalidRequestError";
}

/** 404: no such resource (or route). */
export class NotFoundError extends InvalidRequestError {
  override name = "NotFoundError";
}

/** 401: no credential, or an unknown, revoked or expired one. */
export class AuthenticationError extends ApiError {
  override name = "AuthenticationError";
}

/** 403: the credential may not do this (another merchant's data, another chain, the read-only admin key). */
export class PermissionError extends ApiError {
  override name = "PermissionError";
}

/**
 * 409 `idempotency_key_reused` (the key was used with another request: a bug in the caller) or
 * `idempotency_key_in_use` (a request with the key is still running: retryable).
 */
export class IdempotencyError extends ApiError {
  override name = "IdempotencyError";
}

/** 409 for another reason (e.g. redelivering an event a reorg withdrew). */
export class ConflictError extends ApiError {
  override name = "ConflictError";
}

/** 429: over a rate limit; `retryAfterSeconds` says when to come back. */
export class RateLimitError extends ApiError {
  override name = "RateLimitError";
}

/** 5xx: the service (or its database, or a chain RPC behind it) failed; retryable. */
export class ServerError extends ApiError {
  override name = "ServerError";
}

/** No answer: the connection failed or was reset. Retryable (for a POST, only with an `Idempotency-Key`). */
export class ConnectionError extends ApiError {
  override name = "ConnectionError";
  constructor(message: string, cause?: unknown) {
    super(message, { status: 0, type: "connection_error", code: "connection_failed" }, { cause });
  }
}

/** No answer within `timeoutMs` (default 80 s). */
export class TimeoutError extends ApiError {
  override name = "TimeoutError";
  constructor(timeoutMs: number, cause?: unknown) {
    super(`no answer within ${timeoutMs} ms`, { status: 0, type: "connection_error", code: "timeout" }, { cause });
  }
}

type ErrorClass = new (message: string, fields: ApiErrorFields) => ApiError;

/** The class of an answer's error. */
function errorClassOf(status: number, code: string): ErrorClass {
  if (status === 401) return AuthenticationError;
  if (status === 403) return PermissionError;
  if (status === 404) return NotFoundError;
  if (status === 409) return code.startsWith("idempotency_key_") ? IdempotencyError : ConflictError;
  if (status === 429) return RateLimitError;
  if (status >= 500) return ServerError;
  if (status >= 400) return InvalidRequestError;
  return ApiError;
}
