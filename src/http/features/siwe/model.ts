/** Request and response schemas of the SIWE routes. */
import { t } from "elysia";
import { Type, type Static } from "@sinclair/typebox";
import type { OpenAPIV3 } from "openapi-types";
import { jsonSchema, responses } from "../docs";

/** Longest accepted EIP-4361 message, in characters. */
const MAX_MESSAGE_LENGTH = 8192;

/** Longest accepted signature hex (ERC-6492 wraps factory calldata, so it can be long). */
const MAX_SIGNATURE_LENGTH = 20_000;

/** Body of `POST /v0/siwe/verify`. */
export const VerifyBody = t.Object({
  message: t.String({
    minLength: 1,
    maxLength: MAX_MESSAGE_LENGTH,
    description: "The EIP-4361 message exactly as the wallet signed it",
  }),
  signature: t.String({
    pattern: "^0x([0-9a-fA-F]{2})+$",
    maxLength: MAX_SIGNATURE_LENGTH,
    description: "The wallet's signature: 65-byte ECDSA, ERC-1271 or ERC-6492 wrapped, 0x-prefixed hex",
  }),
});
/** Body of `POST /v0/siwe/verify`. */
export type VerifyBody = Static<typeof VerifyBody>;

/** `GET /v0/siwe/nonce`. */
export const NonceResponse = t.Object({
  nonce: t.String({ description: "Single-use nonce to put in the message's Nonce field" }),
  expires_at: t.String({ description: "When the nonce stops being accepted (ISO 8601)" }),
});

/** `POST /v0/siwe/verify`. */
export const SessionResponse = t.Object({
  token: t.String({
    description: "Session token (sess_…): send as 'Authorization: Bearer <token>'; also set as cookie",
  }),
  address: t.String({ description: "The signing address, lowercase: the merchant this session reads" }),
  expires_at: t.String({ description: "When the session ends (ISO 8601)" }),
});

/** `GET /v0/siwe/me`. */
export const MeResponse = t.Object({
  address: t.String(),
  chain_id: t.Integer(),
  expires_at: t.String(),
});

/** `POST /v0/siwe/logout`. */
export const LogoutResponse = t.Object({ ok: t.Literal(true) });

const ADDRESS_EXAMPLE = "0x70997970c51812dc3a010c7d01b50e0d17dc79c8";
const noSession = {
  description:
    "No live session: send a SIWE session token (`Authorization: Bearer sess_…`) or the `siwe_session` cookie. An " +
    "API key is not a session.",
  message: "this route needs a SIWE session token or cookie",
};

/** Documented shape of `GET /v0/siwe/me` (the runtime schema's integer also admits numeric strings). */
const MeResponseDoc = Type.Object({
  address: Type.String({ description: "The session's address, lowercase: the merchant it reads" }),
  chain_id: Type.Integer({ description: "Chain ID of the signed message" }),
  expires_at: Type.String({ format: "date-time", description: "When the session ends (ISO 8601)" }),
});

const sessionCookieHeader = {
  "Set-Cookie": {
    description: "`siwe_session=<token>; Path=/; Max-Age=…; HttpOnly; SameSite=Lax` (`Secure` over https)",
    schema: { type: "string" as const },
  },
};

/** OpenAPI detail of `GET /v0/siwe/nonce`. */
export const nonceDetail = {
  security: [],
  tags: ["siwe"],
  summary: "Get a sign-in nonce",
  description:
    "A fresh single-use nonce for the `Nonce` field of an EIP-4361 message, valid for 10 minutes. Public; rate " +
    "limited per client address. Sent with `Cache-Control: no-store`.",
  responses: responses(
    {
      description: "The nonce and its expiry",
      schema: NonceResponse,
      example: { nonce: "k3Jb7vQx2LmN9pRs", expires_at: "2026-11-20T10:10:00.000Z" },
      freshness: false,
    },
    [429, 503],
  ),
};

const messageExample = [
  "api.example.com wants you to sign in with your Ethereum account:",
  "0x70997970C51812dc3A010C7d01b50e0d17dc79C8",
  "",
  "Sign in to the subscription payments API.",
  "",
  "URI: https://api.example.com",
  "Version: 1",
  "Chain ID: 31337",
  "Nonce: k3Jb7vQx2LmN9pRs",
  "Issued At: 2026-11-20T10:00:00.000Z",
].join("\n");

/** OpenAPI detail of `POST /v0/siwe/verify`. */
export const verifyDetail = {
  security: [],
  tags: ["siwe"],
  summary: "Sign in with a signed message",
  description:
    "Checks a signed EIP-4361 message and opens a session for the signing address: the domain (SIWE_DOMAIN, else the request's host; the " +
    "URI must be on it too), the nonce (spent by the first attempt, whatever its outcome), Issued At / Expiration Time / Not Before, the chain id and the " +
    "signature (plain wallets, ERC-1271 and ERC-6492 contract wallets). Returns a session token, also set as the " +
    "HttpOnly cookie `siwe_session`. The session reads the data of the merchant at the signing address, on the chain it was signed for. Public; " +
    "rate limited per client address.",
  requestBody: {
    required: true,
    content: {
      "application/json": {
        schema: jsonSchema(VerifyBody) as OpenAPIV3.SchemaObject,
        example: {
          message: messageExample,
          signature: `0x${"5c0a3e7b".repeat(16)}1b`,
        },
      },
    },
  },
  responses: responses(
    {
      description: "The session",
      schema: SessionResponse,
      example: {
        token: "sess_4vJ9kQ2mT8xR1pLw6NcY3bZ7hD5gF0aS",
        address: ADDRESS_EXAMPLE,
        expires_at: "2026-11-21T10:00:00.000Z",
      },
      freshness: false,
      headers: sessionCookieHeader,
    },
    [400, 401, 429, 502, 503],
    {
      400: {
        description: "The body is not `{message, signature}`, or the message is not a valid EIP-4361 message.",
        code: "missing_parameter",
        message: "signature is required",
        param: "signature",
      },
      401: {
        description:
          "The domain, chain, times or nonce do not match, or the signature is not the address's. The message says which.",
        message: "the nonce is unknown, already used or expired: get a new one from GET /v0/siwe/nonce",
      },
      502: {
        description: "Checking a contract-wallet signature (ERC-1271/6492) needed the chain's RPC, which failed.",
        message: "could not check a contract-wallet signature: the RPC of chain 31337 failed",
      },
    },
  ),
};

/** OpenAPI detail of `GET /v0/siwe/me`. */
export const meDetail = {
  tags: ["siwe"],
  summary: "Get the current session",
  description: "The session presented as a Bearer token or the `siwe_session` cookie. API keys get a 401 here.",
  security: [{ bearer: [] }],
  responses: responses(
    {
      description: "The session",
      schema: MeResponseDoc,
      example: { address: ADDRESS_EXAMPLE, chain_id: 31337, expires_at: "2026-11-21T10:00:00.000Z" },
      freshness: false,
    },
    [401, 503],
    { 401: noSession },
  ),
};

/** OpenAPI detail of `POST /v0/siwe/logout`. */
export const logoutDetail = {
  tags: ["siwe"],
  summary: "Sign out",
  description:
    "Revokes the session presented as a Bearer token or the `siwe_session` cookie (on every replica at once) and " +
    "clears the cookie. The token is rejected from then on.",
  security: [{ bearer: [] }],
  responses: responses(
    {
      description: "The session is revoked",
      schema: LogoutResponse,
      example: { ok: true },
      freshness: false,
      headers: { "Set-Cookie": { description: "Clears `siwe_session`", schema: { type: "string" } } },
    },
    [401, 503],
    { 401: noSession },
  ),
};
