/** Error envelope types and the classes that carry their HTTP status (see docs/api-rules.md "Errors"). */
import { AppError } from "../common/errors";

/** The `error.type` family of an API error. */
export type ErrorType =
  "invalid_request_error" | "authentication_error" | "permission_error" | "rate_limit_error" | "api_error";

/** Base class: every error a route throws on purpose; rendered as the JSON envelope. Retryable: 429, 502, 503. */
export class ApiError extends AppError {
  constructor(
    readonly status: number,
    readonly type: ErrorType,
    readonly code: string,
    message: string,
    readonly param?: string,
    readonly headers: Record<string, string> = {},
    readonly extra: Record<string, unknown> = {},
  ) {
    super(message, { retryable: status === 429 || status >= 502 });
  }
}

/** 400: a path or query value is malformed. */
export class InvalidParameterError extends ApiError {
  constructor(param: string, message: string) {
    super(400, "invalid_request_error", "invalid_parameter", message, param);
  }
}

/** 400: a required path or query value is absent. */
export class MissingParameterError extends ApiError {
  constructor(param: string, message = `${param} is required`) {
    super(400, "invalid_request_error", "missing_parameter", message, param);
  }
}

/** 400: a create past a per-merchant cap; `code` names the cap (`webhook_endpoint_limit_reached`, `api_key_limit_reached`). */
export class LimitReachedError extends ApiError {
  constructor(code: string, message: string) {
    super(400, "invalid_request_error", code, message);
  }
}

/** 401: no credential, or an unknown, revoked or expired one. */
export class UnauthenticatedError extends ApiError {
  constructor(message = "a valid API key or SIWE session is required") {
    super(401, "authentication_error", "unauthenticated", message, undefined, { "www-authenticate": "Bearer" });
  }
}

/** 403: a credential for one merchant asking for another merchant's data (`admin_read_only`: the admin key writing). */
export class ForbiddenError extends ApiError {
  constructor(
    message = "this credential cannot read that merchant's data",
    code: "forbidden" | "admin_read_only" = "forbidden",
  ) {
    super(403, "permission_error", code, message);
  }
}

/** 404: unknown subscription id or route. */
export class NotFoundError extends ApiError {
  constructor(message = "not found", param?: string) {
    super(404, "invalid_request_error", "not_found", message, param);
  }
}

/** 413 (400 where a spec says so): a request body over the size limit, refused before it is read. */
export class PayloadTooLargeError extends ApiError {
  constructor(maxBytes: number, status: 400 | 413 = 413) {
    super(
      status,
      "invalid_request_error",
      "body_too_large",
      `the request body is larger than ${maxBytes} bytes`,
      "body",
    );
  }
}

/** 409: an `Idempotency-Key` already used by this merchant for a request with another method, path or body. */
export class IdempotencyKeyReusedError extends ApiError {
  constructor() {
    super(
      409,
      "invalid_request_error",
      "idempotency_key_reused",
      "this Idempotency-Key was already used with another request (method, path or body) in the last 24 hours",
      "Idempotency-Key",
    );
  }
}

/** 409: a request with the same `Idempotency-Key` is still in flight; retry once it has answered. */
export class IdempotencyKeyInUseError extends ApiError {
  constructor() {
    super(
      409,
      "invalid_request_error",
      "idempotency_key_in_use",
      "another request with this Idempotency-Key is in progress; retry after it has answered",
      "Idempotency-Key",
      { "retry-after": "1" },
    );
  }
}

/** 429: over the rate limit; `Retry-After` tells when to come back. */
export class RateLimitedError extends ApiError {
  constructor(retryAfterSeconds: number) {
    super(429, "rate_limit_error", "rate_limited", "too many requests", undefined, {
      "retry-after": String(Math.max(1, Math.ceil(retryAfterSeconds))),
    });
  }
}

/** 502: the RPC call of an `onchain`/`both` check failed or timed out. */
export class ChainUnavailableError extends ApiError {
  constructor(message: string, extra: Record<string, unknown> = {}) {
    super(502, "api_error", "chain_unavailable", message, undefined, {}, extra);
  }
}

/** 503: the database is unreachable. */
export class UnavailableError extends ApiError {
  constructor(message = "the database is unavailable, retry shortly", extra: Record<string, unknown> = {}) {
    super(503, "api_error", "unavailable", message, undefined, { "retry-after": "1" }, extra);
  }
}

/** The JSON body of an error response. */
export function errorBody(err: ApiError, requestId: string) {
  return {
    error: {
      type: err.type,
      code: err.code,
      message: err.message,
      ...(err.param ? { param: err.param } : {}),
      ...err.extra,
      request_id: requestId,
    },
  };
}
