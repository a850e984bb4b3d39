import { Elysia } from "elysia";
import { ValueErrorType } from "@sinclair/typebox/errors";
import {
  ApiError,
  InvalidParameterError,
  MissingParameterError,
  NotFoundError,
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

const newRequestId = () => `req_${crypto.randomUUID().replaceAll("-", "")}`;

/** Renders every error as the envelope of docs/api-rules.md "Errors"; nothing reaches the client as a 500 page. */
export const errorHandler = new Elysia({ name: "error-handler" })
  .derive({ as: "global" }, () => ({ requestId: newRequestId() }))
  .onAfterHandle({ as: "global" }, ({ set, requestId }) => {
    set.headers["x-request-id"] = requestId;
  })
  .onError({ as: "global" }, ({ code, error, set, request, ...ctx }) => {
    const requestId = (ctx as { requestId?: string }).requestId ?? newRequestId();
    let apiError: ApiError;
    if (error instanceof ApiError) apiError = error;
    else if (code === "VALIDATION") apiError = validationError(error as ValidationLike, request);
    else if (code === "NOT_FOUND") {
      apiError = new NotFoundError(`no route ${request.method} ${new URL(request.url).pathname}`);
    } else if (code === "PARSE") apiError = new InvalidParameterError("body", "the request body could not be parsed");
    else if (code === "INVALID_COOKIE_SIGNATURE") apiError = new InvalidParameterError("cookie", "a cookie is invalid");
    else if (isDatabaseDown(error)) apiError = new UnavailableError();
    else {
      console.error(
        JSON.stringify({ level: "error", msg: "unhandled", requestId, err: String((error as Error)?.stack ?? error) }),
      );
      apiError = new ApiError(500, "api_error", "internal_error", "internal error");
    }
    set.status = apiError.status;
    for (const [k, v] of Object.entries(apiError.headers)) set.headers[k] = v;
    set.headers["x-request-id"] = requestId;
    set.headers["content-type"] = "application/json";
    return errorBody(apiError, requestId);
  });
