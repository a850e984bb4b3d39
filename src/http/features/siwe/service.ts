/** Sign-In with Ethereum (EIP-4361): nonces, message checks, signature verification and session creation. */
import { verifyMessage, type Hex, type PublicClient } from "viem";
import { generateSiweNonce, parseSiweMessage } from "viem/siwe";
import type { Sql } from "../../../db/client";
import type { ChainRegistry } from "../../../chain/clients";
import { createSession, purgeSessions, type Session } from "../../../auth/sessions";
import { lockForTransaction } from "../../../db/advisory-lock";
import { ChainUnavailableError, InvalidParameterError, UnauthenticatedError } from "../../errors";

/** Life of a nonce from `GET /v0/siwe/nonce`, in seconds. */
export const NONCE_TTL_S = 600;

/** How far in the future a message's `Issued At` may be (client clock skew), in seconds. */
export const ISSUED_AT_SKEW_S = 60;

/** A fresh single-use nonce and when it expires. */
export type IssuedNonce = { nonce: string; expires_at: string };

/** Most unspent nonces kept: a new one beyond it makes the oldest go (they are rows anyone can make). */
export const MAX_UNSPENT_NONCES = 10_000;

/**
 * Stores and returns a new nonce, valid for NONCE_TTL_S seconds, and drops the oldest unspent ones beyond
 * MAX_UNSPENT_NONCES. Issues take turns (a transaction lock), so two at once cannot both keep one too many.
 */
export async function issueNonce(sql: Sql): Promise<IssuedNonce> {
  const nonce = generateSiweNonce();
  return sql.begin(async (tx) => {
    await lockForTransaction(tx, "siwe_nonces");
    const [row] = await tx<{ expires_at: Date }[]>`
      insert into siwe_nonces (nonce, expires_at)
      values (${nonce}, clock_timestamp() + make_interval(secs => ${NONCE_TTL_S}))
      returning expires_at`;
    await tx`
      delete from siwe_nonces where nonce in (
        select nonce from siwe_nonces where used_at is null
        order by expires_at desc, nonce desc offset ${MAX_UNSPENT_NONCES})`;
    return { nonce, expires_at: row!.expires_at.toISOString() };
  });
}

/** Deletes nonces expired for over an hour and long-dead sessions; returns how many rows went. */
export async function purgeExpired(sql: Sql): Promise<number> {
  const nonces = await sql`delete from siwe_nonces where expires_at < now() - interval '1 hour' returning nonce`;
  return nonces.length + (await purgeSessions(sql));
}

/** A parsed message with every field a sign-in needs. */
type SignIn = {
  domain: string;
  uri: string;
  address: Hex;
  chainId: number;
  nonce: string;
  issuedAt: Date;
  expirationTime?: Date;
  notBefore?: Date;
};

/** Parses an EIP-4361 message; throws a 400 naming what is missing or malformed. */
export function parseSignIn(message: string): SignIn {
  const bad = (why: string) => new InvalidParameterError("message", `message is not a valid EIP-4361 message: ${why}`);
  const m = parseSiweMessage(message);
  if (!m.domain || !m.address) throw bad("the first lines must be '<domain> wants you to sign in…' and the address");
  for (const field of ["uri", "version", "chainId", "nonce", "issuedAt"] as const) {
    if (m[field] === undefined) throw bad("it needs URI, Version, Chain ID, Nonce and Issued At lines, in that order");
  }
  if (m.version !== "1") throw bad("Version must be 1");
  if (!Number.isSafeInteger(m.chainId) || m.chainId! <= 0) throw bad("Chain ID must be a positive integer");
  for (const field of ["issuedAt", "expirationTime", "notBefore"] as const) {
    const d = m[field];
    if (d !== undefined && Number.isNaN(d.getTime())) throw bad(`${field} must be an RFC 3339 date-time`);
  }
  return {
    domain: m.domain,
    uri: m.uri!,
    address: m.address,
    chainId: m.chainId!,
    nonce: m.nonce!,
    issuedAt: m.issuedAt!,
    expirationTime: m.expirationTime,
    notBefore: m.notBefore,
  };
}

/** What a sign-in needs from the service. */
export type SignInDeps = { sql: Sql; chains: ChainRegistry; sessionTtlSeconds: number };

/** What a sign-in is checked against. */
export type SignInInput = {
  message: string;
  signature: Hex;
  /** The domain the message must name, and its URI be on (config.SIWE_DOMAIN). */
  domain: string;
  /** Current time (default now). */
  now?: Date;
};

/** The host (with port) of a message's URI, lowercase; "" when it has none. */
function uriHost(uri: string): string {
  try {
    return new URL(uri).host.toLowerCase();
  } catch {
    return "";
  }
}

/** Throws UnauthenticatedError unless the message names this service's domain, a served chain and valid times. */
function checkMessage(deps: SignInDeps, m: SignIn, domain: string, now: Date): void {
  if (m.domain.toLowerCase() !== domain.toLowerCase()) {
    throw new UnauthenticatedError(`the message is for domain "${m.domain}", this service is "${domain}"`);
  }
  if (uriHost(m.uri) !== domain.toLowerCase()) {
    throw new UnauthenticatedError(`the message's URI must be on ${domain}`);
  }
  const served = deps.chains.get(m.chainId) !== undefined || m.chainId === deps.chains.defaultChainId;
  if (!served) {
    const ids = [...new Set([deps.chains.defaultChainId, ...deps.chains.chainIds()])].join(", ");
    throw new UnauthenticatedError(`chain ${m.chainId} is not served here (chains: ${ids})`);
  }
  if (m.issuedAt.getTime() > now.getTime() + ISSUED_AT_SKEW_S * 1000) {
    throw new UnauthenticatedError("the message's Issued At is in the future");
  }
  if (m.expirationTime && m.expirationTime.getTime() <= now.getTime()) {
    throw new UnauthenticatedError("the message has expired (Expiration Time is past)");
  }
  if (m.notBefore && m.notBefore.getTime() > now.getTime()) {
    throw new UnauthenticatedError("the message is not valid yet (Not Before is in the future)");
  }
}

/**
 * Spends the message's nonce, checks the message (domain, URI, chain, times, signature) and opens a session. The
 * first attempt with a nonce spends it, whatever its outcome, so a nonce is tried once; only a failed RPC call (502,
 * no verdict on the signature) gives it back. Throws 400 for a malformed message, 401 for anything that does not
 * authenticate, 502 when the RPC needed to check a contract-wallet signature fails.
 */
export async function signIn(deps: SignInDeps, input: SignInInput): Promise<{ token: string; session: Session }> {
  const now = input.now ?? new Date();
  const m = parseSignIn(input.message);
  // Atomic spend: of concurrent attempts with one nonce, exactly one gets the row back.
  const [spent] = await deps.sql`
    update siwe_nonces set used_at = now()
    where nonce = ${m.nonce} and used_at is null and expires_at > now()
    returning nonce`;
  if (!spent) throw new UnauthenticatedError(NONCE_REJECTED);
  try {
    checkMessage(deps, m, input.domain, now);
    await verifySignature(deps.chains.get(m.chainId), m, input, now);
  } catch (err) {
    if (err instanceof ChainUnavailableError) {
      // Only this attempt holds the nonce (the spend above was atomic), so it can hand it back as it was.
      await deps.sql`update siwe_nonces set used_at = null where nonce = ${m.nonce}`;
    }
    throw err;
  }
  return deps.sql.begin((tx) =>
    createSession(tx, {
      address: m.address,
      chainId: m.chainId,
      ttlSeconds: deps.sessionTtlSeconds,
      notAfter: m.expirationTime,
    }),
  );
}

const NONCE_REJECTED = "the nonce is unknown, already used or expired: get a new one from GET /v0/siwe/nonce";

/**
 * Plain wallets are checked locally (ECDSA recovery, no RPC); anything else goes through the chain's public
 * client, whose `verifySiweMessage` handles ERC-1271 (deployed) and ERC-6492 (counterfactual) contract wallets.
 */
async function verifySignature(client: PublicClient | undefined, m: SignIn, input: SignInInput, now: Date) {
  const plain = await verifyMessage({ address: m.address, message: input.message, signature: input.signature }).catch(
    () => false,
  );
  if (plain) return;
  if (!client) {
    throw new UnauthenticatedError(
      `the signature does not match ${m.address.toLowerCase()}; contract-wallet signatures (ERC-1271/6492) need an ` +
        `RPC endpoint for chain ${m.chainId}, which this service does not have`,
    );
  }
  // No RPC detail in the message: an endpoint URL can carry a provider key.
  const rpcFailed = new ChainUnavailableError(
    `could not check a contract-wallet signature: the RPC of chain ${m.chainId} failed`,
  );
  const ok = await client
    .verifySiweMessage({
      message: input.message,
      signature: input.signature,
      domain: m.domain,
      nonce: m.nonce,
      time: now,
    })
    .catch(() => Promise.reject(rpcFailed));
  if (ok) return;
  // viem reports a failed RPC call as an invalid signature: tell them apart with one cheap call.
  await client.getChainId().catch(() => Promise.reject(rpcFailed));
  throw new UnauthenticatedError(`the signature does not match ${m.address.toLowerCase()}`);
}
