/** OpenAPI pieces shared by the routes (error envelope, response objects) and the /docs plugin. */
import { Elysia } from "elysia";
import { Type as t, type TSchema } from "@sinclair/typebox";
import { openapi } from "@elysiajs/openapi";
import type { OpenAPIV3 } from "openapi-types";

/** The error envelope of service.md, as a schema. */
export const ErrorEnvelope = t.Object(
  {
    error: t.Object({
      type: t.Union(
        ["invalid_request_error", "authentication_error", "permission_error", "rate_limit_error", "api_error"].map(
          (v) => t.Literal(v),
        ),
        { description: "Error family" },
      ),
      code: t.String({ description: "Machine-readable code, e.g. invalid_parameter" }),
      message: t.String({ description: "Human-readable explanation" }),
      param: t.Optional(t.String({ description: "The path or query parameter at fault" })),
      request_id: t.String({ description: "Also sent as the X-Request-Id header" }),
    }),
  },
  { description: "Every error response has this shape." },
);

const errorExamples: Record<
  number,
  { description: string; type: string; code: string; message: string; param?: string }
> = {
  400: {
    description: "A path or query parameter is missing or malformed; `param` names it.",
    type: "invalid_request_error",
    code: "invalid_parameter",
    message: "limit must be an integer from 1 to 1000",
    param: "limit",
  },
  401: {
    description: "No credential, or an unknown, revoked or expired API key or session.",
    type: "authentication_error",
    code: "unauthenticated",
    message: "a valid API key or SIWE session is required",
  },
  403: {
    description: "The credential belongs to another merchant.",
    type: "permission_error",
    code: "forbidden",
    message: "this credential cannot read that merchant's data",
  },
  404: {
    description: "Unknown subscription id.",
    type: "invalid_request_error",
    code: "not_found",
    message: "no such subscription",
  },
  429: {
    description: "Over the per-client rate limit; `Retry-After` says when to come back.",
    type: "rate_limit_error",
    code: "rate_limited",
    message: "too many requests",
  },
  502: {
    description: "The chain RPC failed or timed out (`onchain`/`both`); in `both` the body carries `error.indexed`.",
    type: "api_error",
    code: "chain_unavailable",
    message: "the RPC endpoint of chain 31337 did not answer",
  },
  503: {
    description: "The database is unreachable; retry shortly.",
    type: "api_error",
    code: "unavailable",
    message: "the database is unavailable, retry shortly",
  },
};

/** Removes TypeBox's symbol keys so the schema serializes as plain JSON Schema. */
export function jsonSchema(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema));
}

const freshnessHeaderDocs: Record<string, OpenAPIV3.HeaderObject> = {
  "X-Indexed-Block": {
    description: "Newest block of this chain the index has committed (decimal). Absent before the first batch.",
    schema: { type: "string", example: "1234567" },
  },
  "X-Indexed-At": {
    description: "Timestamp of that block (ISO 8601, UTC, milliseconds).",
    schema: { type: "string", format: "date-time", example: "2026-11-20T10:00:00.000Z" },
  },
};

/** OpenAPI `responses` of a route: the 200 body plus the listed error statuses with example envelopes. */
export function responses(
  ok: { description: string; schema: TSchema; example: unknown; link?: boolean; freshness?: boolean },
  errors: number[],
): OpenAPIV3.ResponsesObject {
  const headers: Record<string, OpenAPIV3.HeaderObject> = ok.freshness === false ? {} : { ...freshnessHeaderDocs };
  if (ok.link) {
    headers.Link = {
      description: 'Present when the page was cut by `limit`: `<url of the next page>; rel="next"`.',
      schema: { type: "string" },
    };
  }
  const out: OpenAPIV3.ResponsesObject = {
    200: {
      description: ok.description,
      headers,
      content: { "application/json": { schema: jsonSchema(ok.schema) as OpenAPIV3.SchemaObject, example: ok.example } },
    },
  };
  for (const status of errors) {
    const e = errorExamples[status];
    out[status] = {
      description: e.description,
      ...(status === 429 ? { headers: { "Retry-After": { schema: { type: "integer" as const } } } } : {}),
      content: {
        "application/json": {
          schema: jsonSchema(ErrorEnvelope) as OpenAPIV3.SchemaObject,
          example: {
            error: {
              type: e.type,
              code: e.code,
              message: e.message,
              ...(e.param ? { param: e.param } : {}),
              request_id: "req_3f2c9a0d1b7e4c55a8e6f0b2c4d6e8fa",
            },
          },
        },
      },
    };
  }
  return out;
}

const swaggerDir = (() => {
  try {
    return Bun.resolveSync("swagger-ui-dist/package.json", import.meta.dir).replace(/package\.json$/, "");
  } catch {
    return undefined;
  }
})();

// Plain text without quotes or angle brackets: the plugin also writes it, unescaped, into an HTML attribute.
const API_DESCRIPTION = `Read-only API over an index of on-chain recurring (subscription) payments.

* **Authentication**: send an API key or a SIWE session token as a Bearer token on every merchant route;
  \`/v0/auth/check\` is public and rate limited per client address.
* **Values**: amounts and block numbers are decimal strings (uint256 exact); timestamps are ISO 8601 UTC with
  milliseconds; addresses are lowercase.
* **Freshness**: every response that reads the index carries \`X-Indexed-Block\` and \`X-Indexed-At\`.
* **Paging**: list routes take \`limit\` and \`starting_after\`; a page cut by \`limit\` carries a \`Link\` header
  with rel=next naming the next page.
* **Errors**: a JSON envelope \`error\` with \`type\`, \`code\`, \`message\`, \`param\` (when a parameter is at
  fault) and \`request_id\`; statuses 400, 401, 403, 404, 429, 502 and 503.`;

/** `/docs` (Swagger UI, assets served locally from swagger-ui-dist) and `/docs/json` (the OpenAPI document). */
export function docsRoutes() {
  const app = new Elysia({ name: "docs" })
    .use(
      openapi({
        path: "/docs",
        specPath: "/docs/json",
        provider: "swagger-ui",
        exclude: { paths: ["/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"] },
        swagger: {
          cdn: "/docs/assets/swagger-ui-bundle.js",
          theme: "/docs/assets/swagger-ui.css",
          autoDarkMode: false,
        },
        documentation: {
          info: { title: "Subscription Payments Indexer API", version: "0.1.0", description: API_DESCRIPTION },
          tags: [
            { name: "activity", description: "Charges, failed charges and credit refills of a merchant" },
            { name: "subscriptions", description: "Subscription allocations with their computed status" },
            { name: "authorization", description: "Is a wallet authorized for a plan? (public)" },
            { name: "operations", description: "Liveness and readiness probes" },
          ],
          components: {
            securitySchemes: {
              bearer: {
                type: "http",
                scheme: "bearer",
                description: "An API key (`bun run apikey create --merchant 0x…`) or a SIWE session token.",
              },
            },
          },
        },
      }),
    )
    .get("/docs/assets/swagger-ui-bundle.js", () => asset("swagger-ui-bundle.js", "text/javascript; charset=utf-8"), {
      detail: { hide: true },
    })
    .get("/docs/assets/swagger-ui.css", () => asset("swagger-ui.css", "text/css; charset=utf-8"), {
      detail: { hide: true },
    });
  return app;
}

function asset(name: string, type: string): Response {
  const file = swaggerDir ? Bun.file(swaggerDir + name) : undefined;
  if (!file) return new Response("swagger-ui-dist is not installed", { status: 404 });
  return new Response(file, { headers: { "content-type": type, "cache-control": "public, max-age=86400" } });
}
