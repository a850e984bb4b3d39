/**
 * Refuses request bodies over the limit before they are read: a declared `Content-Length` over it is a 413 envelope
 * at once. Bodies without a length (chunked) are cut by the server's `maxRequestBodySize` (see {@link serveOptions}).
 */
import { Elysia } from "elysia";
import { PayloadTooLargeError } from "../errors";

/** Largest request body the API accepts: a SIWE verify body is under 30 KiB. */
export const MAX_BODY_BYTES = 64 * 1024;

/** Options for `app.listen` that make Bun itself refuse larger bodies (its default is 128 MB). */
export const serveOptions = { maxRequestBodySize: MAX_BODY_BYTES } as const;

/** Adds the Content-Length check to every route of the app. */
export function bodyLimit(maxBytes = MAX_BODY_BYTES) {
  return new Elysia({ name: "body-limit", seed: maxBytes }).onRequest(({ request }) => {
    const declared = request.headers.get("content-length");
    if (declared !== null && Number(declared) > maxBytes) {
      throw new PayloadTooLargeError(maxBytes);
    }
  });
}
