import { Elysia } from "elysia";
import { ValueErrorType } from "@sinclair/typebox/errors";
import { AuthError, ForbiddenCredentialError, ReadOnlyCredentialError } from "../../auth/errors";
import { ApiKeyLimitError } from "../../auth/api-keys";
import { EndpointLimitError, InvalidFieldError } from "../../webhooks/errors";
import { createLogger, type Logger } from "../../common/log";
import {
  ApiError,
  ForbiddenError,
  InvalidParameterError,
  LimitReachedError,
  MissingParameterError,
  NotFoundError,
  UnauthenticatedError,
  UnavailableError,
  errorBody,
} from "../errors";

const DB_DOWN_CODES = new Set([
  "ECONNREFUSED",
  "ECONNRESET",
  "ETIMEDOUT",
  "EHOSTUNREACH",
  "ENETUNREACH",
  "ENOTFOUND",
  "EPIPE",
  "CONNECTION_CLOSED",
  "CONNECTION_ENDED",
  "CONNECTION_DESTROYED",
  "CONNECT_TIMEOUT",
]);

/** Errors a dead, restarting, dropped or overloaded database raises through postgres.js. */
function isDatabaseDown(err: unknown): boolean {
  const code = String((err as { code?: unknown })?.code ?? "");
  return (
    DB_DOWN_CODES.has(code) ||
    code.startsWith("08") || // connection exceptions
    code.startsWith("53") || // insufficient resources (too many connections, out of memory)
    code.startsWith("57") || // operator intervention: shutdown, cannot connect now, query cancelled
    code === "3D000" || // the database does not exist (dropped)
    code.startsWith("28") // authentication to the database failed
  );
}

type ValidationLike = {
  type?: string;
  value?: unknown;
  valueError?: { path?: string; type?: number; schema?: unknown; message?: string; value?: unknown };
  validator?: { schema?: { properties?: Record<string, unknown> } };
  customError?: unknown;
};

function containsSchema(schema: unknown, target: unknown, depth = 0): boolean {
  if (schema === target) return true;
  if (!schema || typeof schema !== "object" || depth > 4) return false;
  const s = schema as { anyOf?: unknown[]; allOf?: unknown[]; oneOf?: unknown[]; items?: unknown };
  return [...(s.anyOf ?? []), ...(s.allOf ?? []), ...(s.oneOf ?? []), ...(s.items ? [s.items] : [])].some((x) =>
    containsSchema(x, target, depth + 1),
  );
}

/**
 * First failing field of an Elysia validation error, as the parameter name. A failed transform (e.g. `t.Numeric`
 * with `limit=0`) is raised from inside the decoder as type "property" with no path and no parent schema, so the
 * field is then the query parameter holding the rejected value.
 */
function validationParam(err: ValidationLike, request: Request): string | undefined {
  const path = err.valueError?.path;
  if (path && path !== "/") return path.replace(/^\//, "").split("/")[0];
  const props = err.validator?.schema?.properties ?? {};
  for (const [name, schema] of Object.entries(props)) {
    if (containsSchema(schema, err.valueError?.schema)) return name;
  }
  if (err.type === "property" && err.value !== undefined) {
    for (const [name, raw] of new URL(request.url).searchParams) {
      if (raw === String(err.value) || (raw.trim() !== "" && Number(raw) === err.value)) return name;
    }
  }
  return err.type === "body" ? "body" : undefined;
}

/** Maps an Elysia validation error to a 400: missing_parameter for absent required fields, else invalid_parameter. */
function validationError(err: ValidationLike, request: Request): ApiError {
  const param = validationParam(err, request) ?? "request";
  const absent = Boolean(err.valueError?.path) && err.valueError?.value === undefined;
  if (err.valueError?.type === ValueErrorType.ObjectRequiredProperty || absent) return new MissingParameterError(param);
  const custom = typeof err.customError === "string" ? err.customError : undefined;
  const detail = err.valueError?.message ? `: ${err.valueError.message.toLowerCase()}` : "";
  return new InvalidParameterError(param, custom ?? `${param} is invalid${detail}`);
}

/** A new `X-Request-Id` value: `req_` and 32 hex digits. */
export const newRequestId = () => `req_${crypto.randomUUID().replaceAll("-", "")}`;

/** The API error of an auth failure: 403 for a credential reading (or the admin key writing) what it may not, else 401. */
function authError(err: AuthError): ApiError {
  if (err instanceof ReadOnlyCredentialError) return new ForbiddenError(err.message, "admin_read_only");
  return err instanceof ForbiddenCredentialError
    ? new ForbiddenError(err.message)
    : new UnauthenticatedError(err.message);
}

/** The envelope error of anything a request raised; unexpected ones are logged (no stack) and become a 500. */
function toApiError(code: unknown, error: unknown, request: Request, requestId: string, log: Logger): ApiError {
  if (error instanceof ApiError) return error;
  // Elysia wraps what a parser throws (e.g. the body limit's 413) in a ParseError.
  if (code === "PARSE" && (error as { cause?: unknown }).cause instanceof ApiError) {
    return (error as { cause: ApiError }).cause;
  }
  if (error instanceof AuthError) return authError(error);
  if (error instanceof ApiKeyLimitError) return new LimitReachedError("api_key_limit_reached", error.message);
  if (error instanceof InvalidFieldError) return new InvalidParameterError(error.param, error.message);
  if (error instanceof EndpointLimitError)
    return new LimitReachedError("webhook_endpoint_limit_reached", error.message);
  if (code === "VALIDATION") return validationError(error as ValidationLike, request);
  if (code === "NOT_FOUND") return new NotFoundError(`no route ${request.method} ${new URL(request.url).pathname}`);
  if (code === "PARSE") return new InvalidParameterError("body", "the request body could not be parsed");
  if (code === "INVALID_COOKIE_SIGNATURE") return new InvalidParameterError("cookie", "a cookie is invalid");
  if (isDatabaseDown(error)) return new UnavailableError();
  log("error", "unhandled error", {
    requestId,
    method: request.method,
    path: new URL(request.url).pathname,
    err: error,
    code: (error as { code?: unknown })?.code,
  });
  return new ApiError(500, "api_error", "internal_error", "internal error");
}

/** Renders every error as the envelope of docs/api-rules.md "Errors"; nothing reaches the client as a 500 page. */
export function createErrorHandler(log: Logger = createLogger("info")) {
  return new Elysia({ name: "error-handler" })
    .derive({ as: "global" }, () => ({ requestId: newRequestId() }))
    .onAfterHandle({ as: "global" }, ({ set, requestId }) => {
      set.headers["x-request-id"] = requestId;
    })
    .onError({ as: "global" }, ({ code, error, set, request, ...ctx }) => {
      const requestId = (ctx as { requestId?: string }).requestId ?? newRequestId();
      const apiError = toApiError(code, error, request, requestId, log);
      set.status = apiError.status;
      for (const [k, v] of Object.entries(apiError.headers)) set.headers[k] = v;
      set.headers["x-request-id"] = requestId;
      set.headers["content-type"] = "application/json";
      return errorBody(apiError, requestId);
    });
}

/** The error handler with the default logger (JSON lines on stdout). */
export const errorHandler = createErrorHandler();
