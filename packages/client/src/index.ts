/**
 * `@subscription-indexer/client`: a typed client of the Subscription Payments Indexer API. Routes, parameters and
 * answers are the types openapi-typescript generated from the service's OpenAPI document (`./generated/openapi.ts`);
 * calls go through openapi-fetch. A non-2xx answer is thrown as a subclass of {@link ApiError}; each attempt is bounded
 * by a timeout (80 s); network errors, timeouts, 429, 502, 503 and 504 are retried with jittered backoff (after
 * `Retry-After` when given) where a second attempt cannot act twice: idempotent methods, and POSTs, which always carry
 * an `Idempotency-Key`. {@link Client.paginate} walks a list through its `Link` headers; {@link webhooks} verifies
 * deliveries.
 */
import createFetchClient, { type Client as FetchClient, type FetchOptions } from "openapi-fetch";
import type { paths } from "./generated/openapi.js";
import { ApiError } from "./errors.js";
import { retryingFetch, type RetryOptions } from "./retry.js";
import { webhooks } from "./webhooks.js";

export {
  ApiError,
  AuthenticationError,
  ConflictError,
  ConnectionError,
  IdempotencyError,
  InvalidRequestError,
  NotFoundError,
  PermissionError,
  RateLimitError,
  ServerError,
  TimeoutError,
  type ApiErrorFields,
} from "./errors.js";
export {
  backoffMs,
  DEFAULT_TIMEOUT_MS,
  IDEMPOTENCY_KEY_HEADER,
  mayRetry,
  newIdempotencyKey,
  retryAfterMs,
  type RetryOptions,
} from "./retry.js";
export {
  signWebhook,
  verifyWebhook,
  webhooks,
  WebhookVerificationError,
  type VerifyOptions,
  type WebhookEvent,
  type WebhookEventOf,
  type WebhookEventType,
  type WebhookHeaders,
} from "./webhooks.js";
export type { paths, components, operations, webhooks as webhookPaths } from "./generated/openapi.js";

/** Options of {@link createClient}. */
export type ClientOptions = {
  /** The service's base URL, e.g. `https://subs.example.com`. */
  baseUrl: string;
  /** An API key (`sk_live_…`) or a SIWE session token (`sess_…`); omit for the public routes. */
  apiKey?: string;
  /**
   * Retries of network errors, timeouts, 429, 502, 503 and 504 (see {@link RetryOptions}; default 2 retries, waits
   * of at most 10 s). A POST is retried only with its `Idempotency-Key`, which the client adds to every POST (pass
   * your own in `headers` to retry across processes).
   */
  retry?: RetryOptions;
  /** Longest wait for one attempt's answer, body included, in ms (default 80,000). */
  timeoutMs?: number;
  /** The fetch to use (default: the global one). */
  fetch?: typeof fetch;
  /** Extra headers sent on every request. */
  headers?: Record<string, string>;
};

/** GET routes whose 200 answer is a JSON array (the pageable lists). */
export type ListPath = {
  [P in keyof paths]: paths[P] extends { get: { responses: { 200: { content: { "application/json": unknown[] } } } } }
    ? P
    : never;
}[keyof paths];

/** One element of the list a {@link ListPath} answers. */
export type ListItem<P extends ListPath> = paths[P] extends {
  get: { responses: { 200: { content: { "application/json": (infer T)[] } } } };
}
  ? T
  : never;

/**
 * The client: openapi-fetch's typed `GET`/`POST`/`PATCH`/`DELETE` (non-2xx answers thrown as {@link ApiError}), typed
 * for JSON answers (a CSV export: pass `parseAs: "text"`), plus {@link Client.paginate}.
 */
export type Client = FetchClient<paths, "application/json"> & {
  /** {@link webhooks}: `client.webhooks.verify(payload, headers, secret)`. */
  webhooks: typeof webhooks;
  /**
   * Every element of a list, page after page: follows `Link: <…>; rel="next"` until a page has none. Only the next
   * page's query is taken from the link; it is always requested from `baseUrl`, so the credential never goes to
   * another origin.
   */
  paginate: <P extends ListPath>(path: P, init: FetchOptions<paths[P]["get"]>) => AsyncIterableIterator<ListItem<P>>;
};

/** The `rel="next"` URL of a `Link` header, if any. */
export function nextLink(link: string | null): URL | undefined {
  if (!link) return undefined;
  for (const part of link.split(",")) {
    const m = /^\s*<([^>]*)>\s*;(.*)$/.exec(part);
    if (m && /(^|;)\s*rel\s*=\s*"?next"?\s*(;|$)/i.test(m[2]!) && URL.canParse(m[1]!, "http://x")) {
      return new URL(m[1]!, "http://x");
    }
  }
  return undefined;
}

/** Creates a client of the service at `baseUrl`. */
export function createClient(opts: ClientOptions): Client {
  const headers: Record<string, string> = { ...opts.headers };
  if (opts.apiKey) headers.authorization = `Bearer ${opts.apiKey}`;
  const client = createFetchClient<paths, "application/json">({
    baseUrl: opts.baseUrl.replace(/\/+$/, ""),
    headers,
    fetch: retryingFetch(opts.fetch ?? globalThis.fetch, { retry: opts.retry, timeoutMs: opts.timeoutMs }),
  });
  client.use({
    async onResponse({ response }) {
      if (!response.ok) throw await ApiError.from(response);
      return undefined;
    },
  });

  async function* paginate<P extends ListPath>(path: P, init: FetchOptions<paths[P]["get"]>) {
    let options = init as { params?: { path?: unknown; query?: Record<string, unknown> } };
    for (;;) {
      const { data, response } = await (
        client.GET as (p: string, i: unknown) => Promise<{ data?: unknown; response: Response }>
      )(path, options);
      for (const item of (data ?? []) as ListItem<P>[]) yield item;
      const next = nextLink(response.headers.get("link"));
      if (!next) return;
      options = { ...options, params: { ...options.params, query: Object.fromEntries(next.searchParams) } };
    }
  }

  return Object.assign(client, { paginate, webhooks }) as Client;
}
