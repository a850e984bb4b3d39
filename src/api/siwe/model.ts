/** Request and response schemas of the SIWE routes. */
import { t } from "elysia";
import type { Static } from "@sinclair/typebox";

/** Longest accepted EIP-4361 message, in characters. */
export const MAX_MESSAGE_LENGTH = 8192;

/** Longest accepted signature hex (ERC-6492 wraps factory calldata, so it can be long). */
export const MAX_SIGNATURE_LENGTH = 20_000;

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
