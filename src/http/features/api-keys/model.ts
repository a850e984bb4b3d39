/** Self-serve API keys: bodies, records and the documentation of the `/v0/api_keys/:merchant` routes. */
import { Type as t, type Static } from "@sinclair/typebox";
import type { OpenAPIV3 } from "openapi-types";
import { documented, ParamDocs } from "../../params";
import { jsonSchema, responses } from "../docs";

/** The one chain a key reads: the chain of the session that made it; null (a key of `bun run apikey`): every chain. */
const ChainScope = t.Union([t.Integer(), t.Null()], {
  description:
    "The only chain the key reads: the chain the session that made it was signed for (null: every chain, a key of `bun run apikey`)",
});

/** Body of `POST /v0/api_keys/:merchant`. */
export const CreateKeyBody = t.Object({
  label: t.Optional(t.String({ maxLength: 200, description: "A name to tell the key apart (at most 200 characters)" })),
});

/** A newly created key: the only response that ever carries the secret. */
export const CreatedKey = t.Object({
  id: t.String({ description: "Key id (`key_…`), used to revoke it" }),
  key: t.String({ description: "The secret (`sk_live_…`): shown once, stored only as a hash" }),
  merchant: t.String({ description: "The merchant the key reads (lowercase)" }),
  chain_id: ChainScope,
  label: t.Union([t.String(), t.Null()], { description: "The label, or null" }),
  created_at: t.String({ format: "date-time" }),
});

/** A created key. */
export type CreatedKey = Static<typeof CreatedKey>;

/** A key as listed: never the secret. */
export const KeyRecord = t.Object({
  id: t.String({ description: "Key id (`key_…`)" }),
  prefix: t.String({ description: "The key's first 12 characters, to recognize it" }),
  label: t.Union([t.String(), t.Null()]),
  chain_id: ChainScope,
  created_at: t.String({ format: "date-time" }),
  last_used_at: t.Union([t.String({ format: "date-time" }), t.Null()], {
    description: "Last authenticated request (written at most once a minute); null when never used",
  }),
  revoked_at: t.Union([t.String({ format: "date-time" }), t.Null()], { description: "Null while the key works" }),
});

/** A listed key. */
export type KeyRecord = Static<typeof KeyRecord>;

/** Response of `DELETE /v0/api_keys/:merchant/:id`. */
export const RevokedKey = t.Object({ id: t.String(), revoked: t.Literal(true) });

/** Path of the collection routes. */
export const KeysParamsDoc = t.Object({ merchant: ParamDocs.merchant });

/** Path of the revoke route. */
export const KeyParamsDoc = t.Object({
  merchant: ParamDocs.merchant,
  id: documented(
    t.String({
      description: "The key's id, as returned at creation and by the list",
      examples: ["key_9f2c4a1b7d3e5f60a8b2c4d6"],
    }),
  ),
});

const MERCHANT = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const listed: KeyRecord = {
  id: "key_9f2c4a1b7d3e5f60a8b2c4d6",
  prefix: "sk_live_4Hq2",
  label: "production server",
  chain_id: 8453,
  created_at: "2026-11-20T10:00:00.000Z",
  last_used_at: "2026-11-21T08:12:00.000Z",
  revoked_at: null,
};

const badMerchant = {
  400: { message: "merchant must be an address: 0x followed by 40 hex digits", param: "merchant" },
};

const sessionOnly = {
  403: {
    description:
      "The credential is an API key or the admin key (keys are minted only by a wallet session), or a session of another merchant.",
    message:
      "an API key cannot mint, list or revoke keys: sign in with the merchant's wallet (SIWE) and send the session token",
  },
};

/** The 201 body's example. */
export const createdExample: CreatedKey = {
  id: listed.id,
  key: "sk_live_4Hq2vX9bN7mK3pR8sT1wY6zC5dF0gJ2hL4nQ8rU3",
  merchant: MERCHANT,
  chain_id: 8453,
  label: "production server",
  created_at: listed.created_at,
};

/** OpenAPI detail of `POST /v0/api_keys/:merchant` (201). */
export const createDetail = {
  tags: ["api_keys"],
  summary: "Create an API key",
  description:
    "Creates an API key for the merchant signed in with its wallet. Only a SIWE session of that merchant, sent as " +
    "`Authorization: Bearer <session token>` (never the cookie alone, so no cross-site request can mint a key), " +
    "may call it. The key reads only the chain the session was signed for (`chain_id`), as the session does. " +
    "The secret is in this response only. A merchant holds at most 100 active keys: one more is a 400 " +
    "`api_key_limit_reached` (revoke one first).",
  security: [{ bearer: [] }],
  requestBody: {
    required: false,
    content: {
      "application/json": {
        schema: jsonSchema(CreateKeyBody) as OpenAPIV3.SchemaObject,
        example: { label: "production server" },
      },
    },
  },
  responses: responses(
    {
      description: "The new key, shown only here",
      schema: CreatedKey,
      example: createdExample,
      freshness: false,
      status: 201,
    },
    [400, 401, 403, 503],
    { ...badMerchant, ...sessionOnly },
  ),
};

/** OpenAPI detail of `GET /v0/api_keys/:merchant`. */
export const listDetail = {
  tags: ["api_keys"],
  summary: "List API keys",
  description:
    "The merchant's keys, oldest first, revoked ones included (never the secrets). Needs a SIWE session of the " +
    "merchant (Bearer token or the `siwe_session` cookie).",
  security: [{ bearer: [] }],
  responses: responses(
    { description: "The keys", schema: t.Array(KeyRecord), example: [listed], freshness: false },
    [400, 401, 403, 503],
    { ...badMerchant, ...sessionOnly },
  ),
};

/** OpenAPI detail of `DELETE /v0/api_keys/:merchant/:id`. */
export const revokeDetail = {
  tags: ["api_keys"],
  summary: "Revoke an API key",
  description:
    "Revokes one of the merchant's keys: it is rejected from the next request on. Needs a SIWE session of the " +
    "merchant sent as `Authorization: Bearer <session token>`. Revoking a revoked key again answers the same.",
  security: [{ bearer: [] }],
  responses: responses(
    {
      description: "The key is revoked",
      schema: RevokedKey,
      example: { id: listed.id, revoked: true },
      freshness: false,
    },
    [400, 401, 403, 404, 503],
    {
      ...sessionOnly,
      404: { description: "No key of this merchant has that id.", message: "no such API key", param: "id" },
    },
  ),
};
