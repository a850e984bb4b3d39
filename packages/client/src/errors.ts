/** The one error the client throws for an answer that is not 2xx: the service's error envelope and the status. */
export class ApiError extends Error {
  override readonly name = "ApiError";
  /** HTTP status. */
  readonly status: number;
  /** Error family: invalid_request_error, authentication_error, permission_error, rate_limit_error, api_error. */
  readonly type: string;
  /** Machine-readable code, e.g. `invalid_parameter`, `rate_limited`, `unavailable`. */
  readonly code: string;
  /** The parameter at fault, when one is. */
  readonly param: string | undefined;
  /** The request's id (`X-Request-Id`), to quote in support requests. */
  readonly requestId: string | undefined;
  /** The whole `error` object (some errors carry more fields, e.g. `indexed` on a 502 in mode both). */
  readonly body: Record<string, unknown>;

  constructor(status: number, error: Record<string, unknown>, requestId?: string) {
    super(typeof error.message === "string" ? error.message : `HTTP ${status}`);
    this.status = status;
    this.type = typeof error.type === "string" ? error.type : "api_error";
    this.code = typeof error.code === "string" ? error.code : `http_${status}`;
    this.param = typeof error.param === "string" ? error.param : undefined;
    this.requestId = typeof error.request_id === "string" ? error.request_id : requestId;
    this.body = error;
  }

  /** The error of a non-2xx response (its body is read): the envelope when there is one, else a generic one. */
  static async from(res: Response): Promise<ApiError> {
    const requestId = res.headers.get("x-request-id") ?? undefined;
    let error: Record<string, unknown> = {};
    try {
      const body = (await res.json()) as { error?: unknown };
      if (body && typeof body.error === "object" && body.error !== null) error = body.error as Record<string, unknown>;
    } catch {
      // Not JSON (a proxy's error page): the status says enough.
    }
    return new ApiError(res.status, error, requestId);
  }
}
