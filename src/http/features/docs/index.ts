/** OpenAPI pieces shared by the routes (error envelope, response objects) and the /docs plugin. */
import { Elysia } from "elysia";
import { Type as t, type TProperties, type TSchema } from "@sinclair/typebox";
import { openapi } from "@elysiajs/openapi";
import type { OpenAPIV3 } from "openapi-types";

/** Fields of the `error` object of the error envelope (docs/api-rules.md "Errors"). */
const errorFields = {
  type: t.Union(
    ["invalid_request_error", "authentication_error", "permission_error", "rate_limit_error", "api_error"].map((v) =>
      t.Literal(v),
    ),
    { description: "Error family" },
  ),
  code: t.String({ description: "Machine-readable code, e.g. invalid_parameter" }),
  message: t.String({ description: "Human-readable explanation" }),
  param: t.Optional(t.String({ description: "The path or query parameter at fault" })),
  request_id: t.String({ description: "Also sent as the X-Request-Id header" }),
};

/** The error envelope of docs/api-rules.md "Errors", as a schema. */
export const ErrorEnvelope = t.Object(
  { error: t.Object(errorFields) },
  { description: "Every error response has this shape." },
);

/** The error envelope with extra fields some errors carry inside `error` (e.g. `indexed` on a 502 in mode both). */
export function errorEnvelopeWith(extra: TProperties, description?: string) {
  return t.Object(
    { error: t.Object({ ...errorFields, ...extra }) },
    { description: description ?? "Every error response has this shape." },
  );
}

/** What an error response of one route says: the status's defaults, overridable per route. */
export type ErrorDoc = {
  description: string;
  type: string;
  code: string;
  message: string;
  param?: string;
  /** Extra fields inside `error` in the example (documented by `schema`). */
  extra?: Record<string, unknown>;
  /** Schema of the body; default: the plain envelope. */
  schema?: TSchema;
};

const errorExamples: Record<number, ErrorDoc> = {
  400: {
    description:
      "A path or query parameter is missing (`missing_parameter`) or malformed (`invalid_parameter`); `param` names it.",
    type: "invalid_request_error",
    code: "invalid_parameter",
    message: "limit must be an integer from 1 to 1000",
    param: "limit",
  },
  401: {
    description:
      "No credential, a malformed Authorization header, or an unknown, revoked or expired API key or session.",
    type: "authentication_error",
    code: "unauthenticated",
    message: "invalid, revoked or expired credential",
  },
  403: {
    description:
      "The credential belongs to another merchant, or is a SIWE session signed for another chain than `chain_id`.",
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
  409: {
    description:
      "The `Idempotency-Key` was used in the last 24 hours with another request (`idempotency_key_reused`), or a " +
      "request with it is still in flight (`idempotency_key_in_use`, retry after `Retry-After`).",
    type: "invalid_request_error",
    code: "idempotency_key_reused",
    message: "this Idempotency-Key was already used with another request (method, path or body) in the last 24 hours",
    param: "Idempotency-Key",
  },
  429: {
    description:
      "Over the per-client rate limit (refused credentials count against it too); `Retry-After` says when to come back.",
    type: "rate_limit_error",
    code: "rate_limited",
    message: "too many requests",
  },
  502: {
    description: "The chain RPC failed or timed out.",
    type: "api_error",
    code: "chain_unavailable",
    message: "the RPC call to chain 31337 timed out",
  },
  503: {
    description: "The database is unreachable; retry shortly.",
    type: "api_error",
    code: "unavailable",
    message: "the database is unavailable, retry shortly",
  },
};

/** `security` of a route any client may call (the check, sign-in, probes). */
export const PUBLIC_ROUTE: OpenAPIV3.SecurityRequirementObject[] = [];

/** `security` of a route that needs an API key or a session. */
export const BEARER_ROUTE: OpenAPIV3.SecurityRequirementObject[] = [{ bearer: [] }];

/**
 * What a route's `detail` must carry for the document to stay lint-clean (test/http/features/docs-lint.test.ts,
 * `bun run openapi:lint`): tags declared in the document, a summary, a description, an explicit `security`
 * ({@link PUBLIC_ROUTE} or {@link BEARER_ROUTE}) and responses with at least one 4xx (see {@link responses}).
 */
export type RouteDetail = {
  tags: [string, ...string[]];
  summary: string;
  description: string;
  security: OpenAPIV3.SecurityRequirementObject[];
  responses: OpenAPIV3.ResponsesObject;
  requestBody?: OpenAPIV3.RequestBodyObject;
  hide?: boolean;
};

/** A route's `detail`, checked by the compiler against {@link RouteDetail}. */
export const routeDetail = <T extends RouteDetail>(detail: T): T => detail;

/** Removes TypeBox's symbol keys so the schema serializes as plain JSON Schema. */
export function jsonSchema(schema: TSchema): Record<string, unknown> {
  return JSON.parse(JSON.stringify(schema));
}

/** `X-Request-Id`, sent on every response (success or error). */
export const requestIdHeader: Record<string, OpenAPIV3.HeaderObject> = {
  "X-Request-Id": {
    description:
      "Identifier of this request (`req_` + 32 hex), also in `error.request_id`; quote it in support requests.",
    schema: { type: "string", example: "req_3f2c9a0d1b7e4c55a8e6f0b2c4d6e8fa" },
  },
};

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

const errorHeaderDocs: Record<number, Record<string, OpenAPIV3.HeaderObject>> = {
  401: {
    "WWW-Authenticate": { description: "Always `Bearer`.", schema: { type: "string", example: "Bearer" } },
  },
  409: {
    "Retry-After": {
      description: "With `idempotency_key_in_use`: seconds to wait before retrying.",
      schema: { type: "integer", example: 1 },
    },
  },
  429: {
    "Retry-After": {
      description: "Seconds until a request is accepted again.",
      schema: { type: "integer", example: 12 },
    },
  },
  503: {
    "Retry-After": { description: "Seconds to wait before retrying.", schema: { type: "integer", example: 1 } },
  },
};

/** One error response of a route: the status's defaults with `doc` applied. */
export function errorResponse(status: number, doc: Partial<ErrorDoc> = {}): OpenAPIV3.ResponseObject {
  const base = errorExamples[status];
  if (!base) throw new Error(`no documented error for status ${status}`);
  const e = { ...base, ...doc };
  return {
    description: e.description,
    headers: { ...requestIdHeader, ...errorHeaderDocs[status] },
    content: {
      "application/json": {
        schema: jsonSchema(e.schema ?? ErrorEnvelope) as OpenAPIV3.SchemaObject,
        example: {
          error: {
            type: e.type,
            code: e.code,
            message: e.message,
            ...(e.param ? { param: e.param } : {}),
            ...e.extra,
            request_id: "req_3f2c9a0d1b7e4c55a8e6f0b2c4d6e8fa",
          },
        },
      },
    },
  };
}

/**
 * OpenAPI `responses` of a route: the 200 body plus the listed error statuses with example envelopes. `errors`
 * overrides the default description, example or schema of a status for this route.
 */
export function responses(
  ok: {
    description: string;
    schema: TSchema;
    example: unknown;
    link?: boolean;
    freshness?: boolean;
    headers?: Record<string, OpenAPIV3.HeaderObject>;
    /** The success status (default 200; 201 for a create). */
    status?: 200 | 201;
  },
  statuses: number[],
  errors: Partial<Record<number, Partial<ErrorDoc>>> = {},
): OpenAPIV3.ResponsesObject {
  const headers: Record<string, OpenAPIV3.HeaderObject> = {
    ...(ok.freshness === false ? {} : freshnessHeaderDocs),
    ...requestIdHeader,
    ...ok.headers,
  };
  if (ok.link) {
    headers.Link = {
      description: 'Present when the page was cut by `limit`: `<url of the next page>; rel="next"`.',
      schema: { type: "string" },
    };
  }
  const out: OpenAPIV3.ResponsesObject = {
    [ok.status ?? 200]: {
      description: ok.description,
      headers,
      content: { "application/json": { schema: jsonSchema(ok.schema) as OpenAPIV3.SchemaObject, example: ok.example } },
    },
  };
  for (const status of statuses) out[status] = errorResponse(status, errors[status]);
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
  fault) and \`request_id\`; statuses 400, 401, 403, 404, 409, 429, 502 and 503.
* **Idempotency**: a POST made with an API key or a session may carry an \`Idempotency-Key\` header; for 24 hours a
  retry with the same key and the same request gets the first answer again (\`Idempotent-Replayed: true\`) instead
  of acting twice; the same key with another request is a 409 \`idempotency_key_reused\`.
* **Webhooks**: the \`webhooks\` section describes the signed POST each event type sends to an endpoint.`;

type Operation = OpenAPIV3.OperationObject & { parameters?: OpenAPIV3.ParameterObject[] };
type DocRoute = {
  method: string;
  path: string;
  hooks?: { detail?: { responses?: OpenAPIV3.ResponsesObject; requestBody?: OpenAPIV3.RequestBodyObject } };
};

/** `anyOf` of string constants (TypeBox's union of literals) as a plain `enum`, which Swagger UI shows as a list. */
function constUnionToEnum(schema: Record<string, unknown>): Record<string, unknown> {
  const { anyOf, ...rest } = schema as { anyOf?: { const?: unknown; type?: string }[] };
  if (!anyOf?.length || !anyOf.every((s) => s.type === "string" && typeof s.const === "string")) return schema;
  return { ...rest, type: "string", enum: anyOf.map((s) => s.const) };
}

/**
 * Finishes the document the plugin generated (a copy; the plugin caches its own):
 * - a parameter's description and first example move up from its schema onto the parameter, where Swagger UI shows
 *   them (it ignores `schema.description`), and a union of string literals becomes an `enum`;
 * - a route's `detail.responses` and `detail.requestBody` win over what the plugin derives from its `response` and
 *   `body` schemas (the plugin otherwise drops them, losing the examples and error statuses).
 */
function finishDocument(generated: OpenAPIV3.Document, routes: DocRoute[], extra: DocsOptions): OpenAPIV3.Document {
  const doc = structuredClone(generated);
  doc.servers = [{ url: "/", description: "The server that serves this document" }];
  doc.info.license = { name: "MIT", identifier: "MIT" } as OpenAPIV3.LicenseObject;
  for (const item of Object.values(doc.paths ?? {})) {
    for (const op of Object.values(item ?? {}) as Operation[]) {
      for (const p of op?.parameters ?? []) {
        const schema = p.schema as { description?: string; examples?: unknown[] } | undefined;
        if (p.description === undefined && schema?.description) p.description = schema.description;
        if (p.example === undefined && Array.isArray(schema?.examples) && schema.examples.length > 0) {
          p.example = schema.examples[0];
        }
        if (p.schema) p.schema = constUnionToEnum(p.schema as Record<string, unknown>);
      }
    }
  }
  for (const route of routes) {
    const detail = route.hooks?.detail;
    const op = doc.paths?.[route.path.replace(/:([^/]+)/g, "{$1}")]?.[
      route.method.toLowerCase() as OpenAPIV3.HttpMethods
    ] as Operation | undefined;
    if (!op || !detail) continue;
    if (detail.responses) op.responses = { ...op.responses, ...structuredClone(detail.responses) };
    if (detail.requestBody) op.requestBody = structuredClone(detail.requestBody);
  }
  for (const item of Object.values(doc.paths ?? {})) {
    const post = item?.post as Operation | undefined;
    if (post && post.security?.some((s) => "bearer" in s)) addIdempotency(post);
  }
  if (extra.webhooks) (doc as { webhooks?: unknown }).webhooks = extra.webhooks;
  return doc;
}

/** The `Idempotency-Key` header of a POST with a merchant credential (src/http/plugins/idempotency.ts) and its 409. */
function addIdempotency(op: Operation) {
  op.parameters = [...(op.parameters ?? []), idempotencyKeyParameter];
  const conflict = errorResponse(409);
  const own = op.responses?.[409] as OpenAPIV3.ResponseObject | undefined;
  op.responses = {
    ...op.responses,
    409: own ? { ...own, description: `${own.description} Or: ${conflict.description}` } : conflict,
  };
  for (const [status, res] of Object.entries(op.responses)) {
    if (!/^2/.test(status) || "$ref" in res) continue;
    res.headers = { ...res.headers, "Idempotent-Replayed": replayedHeader };
  }
}

/** The header of an answer replayed for an `Idempotency-Key`. */
const replayedHeader: OpenAPIV3.HeaderObject = {
  description: "`true` when this is the stored answer of an earlier request with the same `Idempotency-Key`.",
  schema: { type: "string", enum: ["true"] },
};

/** The request header of an idempotent POST. */
const idempotencyKeyParameter: OpenAPIV3.ParameterObject = {
  name: "Idempotency-Key",
  in: "header",
  required: false,
  description:
    "Makes a retry safe: the first request with a key runs, and for 24 hours a retry with the same key and the same " +
    "request (method, path, query, body) gets its answer again, with `Idempotent-Replayed: true`, instead of acting " +
    "twice. Keys are per merchant; send a new random one (a UUID) per operation. 1 to 255 printable ASCII characters.",
  schema: { type: "string", minLength: 1, maxLength: 255 },
  example: "5c1f0e2d-3b4a-4968-8776-a5b4c3d2e1f0",
};

/** Swagger UI settings: every URL local to this server. */
const swaggerOptions = {
  cdn: "/docs/assets/swagger-ui-bundle.js",
  theme: "/docs/assets/swagger-ui.css",
  // Absolute: the plugin's default ("docs/json", relative) breaks the page when it is opened as /docs/.
  url: "/docs/json",
  autoDarkMode: false,
  // Links to one operation (/docs#/activity/getV0ActivityByMerchant).
  deepLinking: true,
  // No badge from validator.swagger.io: the page loads nothing from another host.
  validatorUrl: "none",
};

/** What the app adds to the generated document. */
export type DocsOptions = {
  /** The `webhooks` section (OpenAPI 3.1): one entry per event type (./webhooks.ts). */
  webhooks?: Record<string, OpenAPIV3.PathItemObject>;
};

/** `/docs` (Swagger UI, assets served locally from swagger-ui-dist) and `/docs/json` (the OpenAPI document). */
export function docsRoutes(extra: DocsOptions = {}) {
  const finished = new WeakMap<object, OpenAPIV3.Document>();
  const app = new Elysia({ name: "docs" })
    // Local to this plugin: it runs for the routes below (the plugin's included), not for the API's.
    .onAfterHandle(({ path, response }) => {
      if (path !== "/docs/json" || typeof response !== "object" || response === null) return;
      let doc = finished.get(response);
      if (!doc) {
        // getGlobalRoutes is what the plugin itself reads: every route of the app this plugin is mounted in.
        const routes = (app as unknown as { getGlobalRoutes(): DocRoute[] }).getGlobalRoutes();
        doc = finishDocument(response as OpenAPIV3.Document, routes, extra);
        finished.set(response, doc);
      }
      return doc;
    })
    .use(
      openapi({
        path: "/docs",
        specPath: "/docs/json",
        provider: "swagger-ui",
        exclude: { paths: ["/docs/assets/swagger-ui-bundle.js", "/docs/assets/swagger-ui.css"] },
        swagger: swaggerOptions,
        documentation: {
          info: { title: "Subscription Payments Indexer API", version: "0.1.0", description: API_DESCRIPTION },
          tags: [
            { name: "activity", description: "Charges, failed charges and credit refills of a merchant" },
            { name: "subscriptions", description: "Subscription allocations with their computed status" },
            { name: "renewals", description: "Which upcoming renewals will fail, and why, before they do" },
            { name: "authorization", description: "Is a wallet authorized for a plan? (public)" },
            { name: "stats", description: "Revenue, failures, subscriptions and run rate of a merchant over time" },
            { name: "events", description: "The event log: what webhooks deliver, readable and pageable" },
            {
              name: "webhooks",
              description: "Endpoints that receive the event log as signed POSTs (Standard Webhooks)",
            },
            {
              name: "api_keys",
              description: "API keys a merchant signed in with its wallet creates, lists and revokes",
            },
            {
              name: "siwe",
              description:
                "Sign-In with Ethereum (EIP-4361): a signed message opens a session that reads the signing merchant's data",
            },
            { name: "operations", description: "Liveness and readiness probes" },
          ],
          components: {
            securitySchemes: {
              bearer: {
                type: "http",
                scheme: "bearer",
                description:
                  "An API key (`bun run apikey create --merchant 0x…`; starts with `sk_live_`), a SIWE session token " +
                  "(`sess_…`, from `POST /v0/siwe/verify`) or the operator's admin key. Browsers may send the session " +
                  "as the `siwe_session` cookie instead.",
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
