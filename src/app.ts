import { Elysia } from "elysia";
import type { Sql } from "./db/client";
import type { Config } from "./config";
import type { ChainRegistry } from "./chain/clients";
import type { Notifier } from "./db/notify";
import { ApiError, InvalidParameterError, NotFoundError, UnavailableError, errorBody } from "./api/errors";

/** What the HTTP app needs from the process around it. */
export type AppDeps = {
  sql: Sql;
  config: Config;
  chains: ChainRegistry;
  notifier?: Notifier;
};

/** Errors a dead or restarting database raises through postgres.js. */
function isDatabaseDown(err: unknown): boolean {
  const code = (err as { code?: string })?.code ?? "";
  return (
    ["ECONNREFUSED", "ECONNRESET", "CONNECTION_CLOSED", "CONNECTION_ENDED", "CONNECTION_DESTROYED", "CONNECT_TIMEOUT"].includes(code) ||
    code.startsWith("57P") || // admin shutdown, cannot connect now
    code.startsWith("08") // connection exceptions
  );
}

/** First failing field of an Elysia validation error, as the query/path parameter name. */
function validationParam(err: { valueError?: { path?: string }; all?: { path?: string }[] }): string | undefined {
  const path = err.valueError?.path ?? err.all?.[0]?.path;
  return path ? path.replace(/^\//, "").split("/")[0] : undefined;
}

/** Renders every error as the service.md envelope; nothing reaches the client as a 500 page. */
export const errorHandler = new Elysia({ name: "error-handler" })
  .derive({ as: "global" }, () => ({ requestId: `req_${crypto.randomUUID().replaceAll("-", "")}` }))
  .onAfterHandle({ as: "global" }, ({ set, requestId }) => {
    set.headers["x-request-id"] = requestId;
  })
  .onError({ as: "global" }, ({ code, error, set, ...ctx }) => {
    const requestId = (ctx as { requestId?: string }).requestId ?? `req_${crypto.randomUUID().replaceAll("-", "")}`;
    let apiError: ApiError;
    if (error instanceof ApiError) apiError = error;
    else if (code === "VALIDATION") {
      const param = validationParam(error as never) ?? "request";
      apiError = new InvalidParameterError(param, `${param} is invalid`);
    } else if (code === "NOT_FOUND") apiError = new NotFoundError("no such route");
    else if (code === "PARSE") apiError = new InvalidParameterError("body", "the request body is not valid JSON");
    else if (isDatabaseDown(error)) apiError = new UnavailableError();
    else {
      console.error(JSON.stringify({ level: "error", msg: "unhandled", requestId, err: String((error as Error)?.stack ?? error) }));
      apiError = new ApiError(500, "api_error", "internal_error", "internal error");
    }
    set.status = apiError.status;
    for (const [k, v] of Object.entries(apiError.headers)) set.headers[k] = v;
    set.headers["x-request-id"] = requestId;
    set.headers["content-type"] = "application/json";
    return errorBody(apiError, requestId);
  });

/** Builds the HTTP app: every `/v0` feature plus health and docs. */
export function createApp(deps: AppDeps) {
  return new Elysia().use(errorHandler);
}

/** The app's type, for a typed Eden client. */
export type App = ReturnType<typeof createApp>;
