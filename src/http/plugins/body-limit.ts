/**
 * Request bodies over the limit are refused before they are read or parsed, with a 413 envelope (a 400 on the
 * webhook routes, whose spec counts an oversized body among bad bodies): a declared
 * `Content-Length` over it at once, a body without one (chunked) as soon as the bytes read pass it. Bun itself
 * refuses anything over {@link serveOptions}' `maxRequestBodySize` (its default is 128 MB) before the app runs.
 */
import { Elysia, ParseError } from "elysia";
import { PayloadTooLargeError } from "../errors";

/** Largest request body the API accepts: a SIWE verify body is under 30 KiB. */
export const MAX_BODY_BYTES = 64 * 1024;

/**
 * Options of `new Elysia({ serve })`. Bun's own body limit: Bun answers a bare 413 to a declared length over it
 * without calling the app, so it sits above the app's limit, which answers with the JSON envelope; unread bytes are
 * never buffered. No `SO_REUSEPORT` (Elysia's default): a second process on a port in use must fail to start, not
 * quietly take half of the connections.
 */
export const serveOptions = { maxRequestBodySize: 16 * 1024 * 1024, reusePort: false } as const;

/** Routes whose oversized bodies are a 400 (webhooks.md §3). */
const WEBHOOK_ROUTES = /^\/v0\/(webhook_endpoints\/|events\/[^/]+\/[^/]+\/redeliver$)/;

/** The error for a body over `maxBytes` sent to `url`. */
const tooLarge = (url: string, maxBytes: number) =>
  new PayloadTooLargeError(maxBytes, WEBHOOK_ROUTES.test(new URL(url).pathname) ? 400 : 413);

/** Reads at most `maxBytes` of a body; throws PayloadTooLargeError as soon as it is longer. */
async function readCapped(body: ReadableStream<Uint8Array>, maxBytes: number, url: string): Promise<Uint8Array> {
  const reader = body.getReader();
  const chunks: Uint8Array[] = [];
  let length = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    length += value.byteLength;
    if (length > maxBytes) {
      reader.cancel().catch(() => {});
      throw tooLarge(url, maxBytes);
    }
    chunks.push(value);
  }
  return Buffer.concat(chunks);
}

/**
 * Whether a body of `type` sent to `url` is read as JSON: a JSON type; on the webhook routes any type (webhooks.md §3:
 * "Bodies are JSON", so `curl -d '{…}'`, sent as a form, works); elsewhere under /v0 a body of no type or text/plain
 * (what `fetch` sends for a string), which no route would take as text.
 */
function readsAsJson(type: string, url: string): boolean {
  if (type === "application/json" || type.endsWith("+json")) return true;
  const path = new URL(url).pathname;
  if (WEBHOOK_ROUTES.test(path)) return true;
  return path.startsWith("/v0/") && (type === "" || type === "text/plain");
}

/**
 * Parses a body read within the limit the way Elysia's default parsers would, but as JSON wherever
 * {@link readsAsJson} says; an empty JSON body is null.
 */
async function parseBody(bytes: Uint8Array, contentType: string, url: string): Promise<unknown> {
  const type = contentType.split(";")[0]!.trim().toLowerCase();
  const text = () => new TextDecoder().decode(bytes);
  if (readsAsJson(type, url)) {
    if (bytes.byteLength === 0) return null; // an empty JSON body is no body (null: Elysia's own parser stays out)
    try {
      return JSON.parse(text());
    } catch (err) {
      throw new ParseError(err as Error);
    }
  }
  if (type === "application/x-www-form-urlencoded") return Object.fromEntries(new URLSearchParams(text()));
  if (type === "multipart/form-data") {
    return new Response(new Blob([bytes as Uint8Array<ArrayBuffer>]), { headers: { "content-type": contentType } })
      .formData()
      .catch((err: Error) => {
        throw new ParseError(err);
      });
  }
  return text();
}

/** The Content-Length check and the capped body parser, for every route of the app. */
export function bodyLimit(maxBytes = MAX_BODY_BYTES) {
  return new Elysia({ name: "body-limit", seed: maxBytes })
    .onRequest(({ request }) => {
      const declared = request.headers.get("content-length");
      if (declared !== null && Number(declared) > maxBytes) throw tooLarge(request.url, maxBytes);
    })
    .onParse({ as: "global" }, async ({ request, contentType }) => {
      if (!request.body) return;
      return parseBody(await readCapped(request.body, maxBytes, request.url), contentType ?? "", request.url);
    });
}
