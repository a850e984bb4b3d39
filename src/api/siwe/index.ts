import { Elysia } from "elysia";
import type { AppDeps } from "../../app";

/** SIWE sign-in routes under /v0/siwe. */
export function siweRoutes(deps: AppDeps) {
  return new Elysia({ prefix: "/v0/siwe", name: "siwe" });
}
