/** The `rateLimit` macro: counts the request against its client's bucket (one store per app) before the handler. */
import { Elysia } from "elysia";
import type { Server } from "bun";
import type { ClientLimiter } from "../rate-limit";

/** Adds the `rateLimit: true` route option; a client over its limit gets a 429 with Retry-After. */
export function rateLimitPlugin(limiter: ClientLimiter) {
  return new Elysia().macro({
    rateLimit: {
      beforeHandle({ request, server }) {
        limiter.hit(request, server as Server<unknown> | null);
      },
    },
  });
}
