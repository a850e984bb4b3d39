/**
 * `Idempotency-Key` on every POST made with a merchant credential (an API key or a SIWE session in `Authorization`),
 * as Stripe does: the first request with a key runs and its answer (status and body) is kept 24 hours for the
 * merchant; a retry with the same key and the same request (method, path, query, credential's chain scope, body) gets
 * that answer again with `Idempotent-Replayed: true` and changes nothing; the same key with another request is a 409
 * `idempotency_key_reused`; a retry while the first is still in flight is a 409 `idempotency_key_in_use`. Answers a
 * retry may change (429 and 5xx) are not kept: the key is released so the retry runs. Requests refused before the
 * handler (a malformed body, no or a bad credential) neither claim nor use a key.
 */
import { Elysia } from "elysia";
import type { Server } from "bun";
import { createHash } from "node:crypto";
import type { Sql } from "../../db/client";
import type { Config } from "../../common/config";
import type { Logger } from "../../common/log";
import { authenticate, principalId, type Principal } from "../../auth/principal";
import { AuthError } from "../../auth/errors";
import { IdempotencyKeyInUseError, IdempotencyKeyReusedError, InvalidParameterError } from "../errors";
import type { ClientLimiter, KeyLimiter } from "../rate-limit";
import { claimKey, pruneIdempotencyKeys, releaseKey, storeAnswer, type StoredAnswer } from "./idempotency-store";

/** The request header. */
export const IDEMPOTENCY_HEADER = "idempotency-key";

/** The header on a replayed answer. */
export const REPLAYED_HEADER = "idempotent-replayed";

/** Longest key accepted (Stripe's bound). */
export const MAX_IDEMPOTENCY_KEY_LENGTH = 255;

/** How often expired answers are deleted (at most; on the first claim after the interval). */
const PRUNE_EVERY_MS = 10 * 60_000;

/** What the plugin needs. */
export type IdempotencyDeps = {
  sql: Sql;
  config: Config;
  limiter: ClientLimiter;
  credentialLimiter: KeyLimiter;
  log?: Logger;
};

/** A claim this process holds for a request in flight. */
type Held = { merchant: string; key: string };

/** Keys sorted at every level, so `{"a":1,"b":2}` and `{"b":2,"a":1}` are one request. */
function canonicalJson(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJson(v)}`).join(",")}}`;
  }
  return JSON.stringify(value ?? null);
}

/** What makes two requests "the same request" for one key. */
export function requestFingerprint(request: Request, principal: Principal, body: unknown): string {
  const url = new URL(request.url);
  const scope = principal.kind === "admin" || principal.chainId === null ? "*" : String(principal.chainId);
  return createHash("sha256")
    .update([request.method, url.pathname, url.search, scope, canonicalJson(body)].join("\n"))
    .digest("hex");
}

/** The key of a request, or undefined without one; 400 when it is empty, too long or not printable ASCII. */
export function parseIdempotencyKey(request: Request): string | undefined {
  const raw = request.headers.get(IDEMPOTENCY_HEADER);
  if (raw === null) return undefined;
  const key = raw.trim();
  if (key.length === 0 || key.length > MAX_IDEMPOTENCY_KEY_LENGTH || !/^[\x21-\x7e]+$/.test(key)) {
    throw new InvalidParameterError(
      "Idempotency-Key",
      `Idempotency-Key must be 1 to ${MAX_IDEMPOTENCY_KEY_LENGTH} printable ASCII characters without spaces, e.g. a UUID`,
    );
  }
  return key;
}

/** The status of an answer: Elysia's `set.status` may be a number or a status name. */
const statusOf = (status: unknown): number => (typeof status === "number" ? status : 200);

/** The answer a handler or the error handler produced, as stored. */
async function answerOf(value: unknown, status: unknown, headers: Record<string, unknown>): Promise<StoredAnswer> {
  if (value instanceof Response) {
    return {
      status: value.status,
      contentType: value.headers.get("content-type") ?? "application/json",
      body: await value.clone().text(),
    };
  }
  const declared = typeof headers["content-type"] === "string" ? headers["content-type"] : undefined;
  if (typeof value === "string") {
    return { status: statusOf(status), contentType: declared ?? "text/plain; charset=utf-8", body: value };
  }
  return { status: statusOf(status), contentType: declared ?? "application/json", body: JSON.stringify(value ?? null) };
}

/** Whether an answer is kept for replay: not when a retry may get another (429, 5xx). */
const keeps = (status: number) => status < 500 && status !== 429;

/** The plugin: claims keys before the handler, stores or releases them once the answer is known. */
export function idempotency(deps: IdempotencyDeps) {
  const held = new WeakMap<Request, Held>();
  let lastPrune = 0;
  const log = deps.log ?? (() => {});

  const prune = () => {
    if (Date.now() - lastPrune < PRUNE_EVERY_MS) return;
    lastPrune = Date.now();
    pruneIdempotencyKeys(deps.sql).catch((err) => log("warn", "idempotency keys: prune failed", { err }));
  };

  /** The merchant credential of the request's `Authorization`, or undefined (the route answers 401/403 itself). */
  const merchantOf = async (request: Request): Promise<Exclude<Principal, { kind: "admin" }> | undefined> => {
    if (!request.headers.get("authorization")?.trim()) return undefined;
    try {
      const principal = await authenticate(deps.sql, deps.config, {
        authorization: request.headers.get("authorization"),
      });
      return principal.kind === "admin" ? undefined : principal;
    } catch (err) {
      if (err instanceof AuthError) return undefined;
      throw err;
    }
  };

  const plugin = new Elysia({ name: "idempotency" })
    .onBeforeHandle({ as: "global" }, async (ctx) => {
      const { request, body, server } = ctx;
      if (request.method !== "POST") return;
      const key = parseIdempotencyKey(request);
      if (key === undefined) return;
      deps.limiter.assertOpen(request, server as Server<unknown> | null);
      const principal = await merchantOf(request);
      if (!principal) return;
      const merchant = principal.merchant;
      const claim = await claimKey(deps.sql, merchant, key, requestFingerprint(request, principal, body));
      prune();
      if (claim.kind === "claimed") {
        held.set(request, { merchant, key });
        return;
      }
      // A replay, a conflict or an in-flight refusal is a request of the credential like any other.
      deps.credentialLimiter.hit(principalId(principal));
      if (claim.kind === "mismatch") throw new IdempotencyKeyReusedError();
      if (claim.kind === "in_flight") throw new IdempotencyKeyInUseError();
      const requestId = (ctx as { requestId?: string }).requestId;
      return new Response(claim.answer.body, {
        status: claim.answer.status,
        headers: {
          "content-type": claim.answer.contentType,
          "cache-control": "no-store",
          [REPLAYED_HEADER]: "true",
          ...(requestId ? { "x-request-id": requestId } : {}),
        },
      });
    })
    // Returns the answer unchanged rather than undefined: Elysia's app-level error path (an unknown route) takes
    // undefined from a mapResponse hook as an empty body. Not an async function: Elysia would then compile every
    // route as async; only a request holding a claim answers with a promise (of the same answer).
    .mapResponse({ as: "global" }, (ctx) => {
      const value = (ctx as { responseValue?: unknown }).responseValue ?? (ctx as { response?: unknown }).response;
      const claim = held.get(ctx.request);
      if (!claim) return value as Response | undefined;
      held.delete(ctx.request);
      return record(claim, value, ctx.set.status, ctx.set.headers as Record<string, unknown>).then(
        () => value as Response | undefined,
      );
    });

  /** Stores the answer of a claimed key, or releases the key; never throws (the answer itself still goes out). */
  async function record(claim: Held, value: unknown, status: unknown, headers: Record<string, unknown>) {
    try {
      const answer = await answerOf(value, status, headers);
      if (keeps(answer.status)) await storeAnswer(deps.sql, claim.merchant, claim.key, answer);
      else await releaseKey(deps.sql, claim.merchant, claim.key);
    } catch (err) {
      // The claim is taken over after IDEMPOTENCY_LOCK_SECONDS.
      log("warn", "idempotency keys: could not record an answer", { err });
    }
  }
  return plugin;
}
