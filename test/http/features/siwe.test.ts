/** SIWE routes against a real anvil chain: nonces, every message check, sessions, and contract wallets. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Elysia } from "elysia";
import {
  createPublicClient,
  createWalletClient,
  encodeDeployData,
  encodeFunctionData,
  getContractAddress,
  http,
  keccak256,
  serializeErc6492Signature,
  toHex,
  type Address,
  type Hex,
} from "viem";
import { foundry } from "viem/chains";
import { errorHandler } from "../../../src/http/plugins/error-handler";
import { bodyLimit } from "../../../src/http/plugins/body-limit";
import { siweRoutes } from "../../../src/http/features/siwe";
import {
  ISSUED_AT_SKEW_S,
  MAX_UNSPENT_NONCES,
  NONCE_TTL_S,
  purgeExpired,
} from "../../../src/http/features/siwe/service";
import { NONCE_PER_MINUTE } from "../../../src/http/features/siwe";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { createApiKey } from "../../../src/auth/api-keys";
import { startAnvil, type Anvil } from "../../../src/chain/anvil";
import { createChainRegistry, publicClientFor, type ChainRegistry } from "../../../src/chain/clients";
import { loadConfig } from "../../../src/common/config";
import {
  testSmartWalletAbi,
  testSmartWalletBytecode,
  testSmartWalletFactoryAbi,
  testSmartWalletFactoryBytecode,
} from "../../../src/chain/abis";
import type { Db } from "../../../src/db/client";
import { accounts } from "../../../testkit/accounts";
import { createTestDb } from "../../../testkit/db";
import { fetchNonce, get, postJson, siweMessage, signedSignIn, type Handler } from "../../../testkit/siwe";

let anvil: Anvil;
let db: Db;
let chains: ChainRegistry;
let app: Handler;
const apps = (deps: { env?: Record<string, string>; chains?: ChainRegistry }) =>
  new Elysia().use(errorHandler).use(
    siweRoutes({
      sql: db.sql,
      config: loadConfig({ CHAIN_ID: "31337", SIWE_DOMAIN: "localhost", ...deps.env }),
      chains: deps.chains ?? chains,
    }),
  );

let factory: Address;
/** A deployed TestSmartWallet owned by `accounts.merchant2`. */
let deployedWallet: Address;

const verify = (body: unknown, headers: Record<string, string> = {}, base?: string) =>
  postJson(app, "/v0/siwe/verify", body, headers, base);

async function errorOf(res: Response) {
  return ((await res.json()) as { error: { code: string; message: string; param?: string } }).error;
}

async function expect401(res: Response, message: string) {
  expect(res.status).toBe(401);
  expect(await errorOf(res)).toMatchObject({ code: "unauthenticated", message: expect.stringContaining(message) });
}

/** CREATE2 address of the wallet `factory.deploy(owner, salt)` would create. */
function walletAddress(owner: Address, salt: Hex): Address {
  const bytecode = encodeDeployData({ abi: testSmartWalletAbi, bytecode: testSmartWalletBytecode, args: [owner] });
  return getContractAddress({ opcode: "CREATE2", from: factory, salt, bytecode });
}

beforeAll(async () => {
  anvil = await startAnvil();
  db = await createTestDb();
  chains = await createChainRegistry(loadConfig({ RPC_URL: anvil.rpcUrl }));
  app = apps({});

  const publicClient = createPublicClient({ chain: foundry, transport: http(anvil.rpcUrl), cacheTime: 0 });
  const deployer = createWalletClient({ chain: foundry, transport: http(anvil.rpcUrl), account: accounts.deployer });
  const hash = await deployer.deployContract({
    abi: testSmartWalletFactoryAbi,
    bytecode: testSmartWalletFactoryBytecode,
  });
  factory = (await publicClient.waitForTransactionReceipt({ hash })).contractAddress!;
  const salt = keccak256(toHex("deployed"));
  const tx = await deployer.writeContract({
    address: factory,
    abi: testSmartWalletFactoryAbi,
    functionName: "deploy",
    args: [accounts.merchant2.address, salt],
  });
  expect((await publicClient.waitForTransactionReceipt({ hash: tx })).status).toBe("success");
  deployedWallet = walletAddress(accounts.merchant2.address, salt);
  expect(await publicClient.getCode({ address: deployedWallet })).not.toBeUndefined();
}, 60_000);

afterAll(async () => {
  await db?.close();
  await anvil?.stop();
});

describe("GET /v0/siwe/nonce", () => {
  test("a fresh single-use nonce valid for ten minutes, stored unused", async () => {
    const before = Date.now();
    const res = await get(app, "/v0/siwe/nonce");
    expect(res.status).toBe(200);
    expect(res.headers.get("cache-control")).toBe("no-store");
    const body = (await res.json()) as { nonce: string; expires_at: string };
    expect(body.nonce).toMatch(/^[a-zA-Z0-9]{32,}$/);
    expect(body.expires_at).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);
    const ttl = (Date.parse(body.expires_at) - before) / 1000;
    expect(ttl).toBeGreaterThan(NONCE_TTL_S - 30);
    expect(ttl).toBeLessThan(NONCE_TTL_S + 30);
    const [row] = await db.sql`select used_at from siwe_nonces where nonce = ${body.nonce}`;
    expect(row).toEqual({ used_at: null });
    expect(await fetchNonce(app)).not.toBe(body.nonce);
  });

  test("rate limited per client: 429 with Retry-After", async () => {
    const limited = apps({ env: { RATE_LIMIT_PER_MINUTE: "2" } });
    expect((await get(limited, "/v0/siwe/nonce")).status).toBe(200);
    expect((await get(limited, "/v0/siwe/nonce")).status).toBe(200);
    const res = await get(limited, "/v0/siwe/nonce");
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await errorOf(res)).code).toBe("rate_limited");
  });
  test("purgeExpired drops long-dead nonces and sessions, keeps the rest", async () => {
    const live = await fetchNonce(app);
    await db.sql`insert into siwe_nonces (nonce, expires_at) values ('oldnonce1', now() - interval '2 hours')`;
    await db.sql`
      insert into sessions (id, token_hash, address, chain_id, expires_at)
      values ('ses_old', 'h-old', '0x0000000000000000000000000000000000000001', 31337, now() - interval '2 days')`;
    expect(await purgeExpired(db.sql)).toBeGreaterThanOrEqual(2);
    expect(
      (await db.sql`select nonce from siwe_nonces where nonce in ('oldnonce1', ${live})`).map((r) => r.nonce),
    ).toEqual([live]);
    expect((await db.sql`select id from sessions where id = 'ses_old'`).length).toBe(0);
  });
});

describe("POST /v0/siwe/verify with a plain wallet", () => {
  test("opens a session: token, lowercase address, expiry, HttpOnly cookie", async () => {
    const res = await verify(await signedSignIn(app, accounts.alice));
    expect(res.status).toBe(200);
    const body = (await res.json()) as { token: string; address: string; expires_at: string };
    expect(body.token).toMatch(/^sess_[1-9A-HJ-NP-Za-km-z]{40,}$/);
    expect(body.address).toBe(accounts.alice.address.toLowerCase());
    const ttl = (Date.parse(body.expires_at) - Date.now()) / 1000;
    expect(Math.abs(ttl - 86_400)).toBeLessThan(60);
    const cookie = res.headers.get("set-cookie")!;
    expect(cookie).toStartWith(`siwe_session=${body.token};`);
    expect(cookie).toContain("HttpOnly");
    expect(cookie).toContain("SameSite=Lax");
    expect(cookie).toContain("Path=/");
    expect(cookie).not.toContain("Secure");
    const [row] = await db.sql`select address, chain_id, revoked_at from sessions where address = ${body.address}`;
    expect(row).toEqual({ address: body.address, chain_id: "31337", revoked_at: null });
  });

  test("over https the cookie is __Host-siwe_session and Secure; X-Forwarded-Proto counts only behind a configured proxy", async () => {
    const direct = await verify(await signedSignIn(app, accounts.alice), {}, "https://localhost");
    expect(direct.status).toBe(200);
    const token = ((await direct.json()) as { token: string }).token;
    const cookie = direct.headers.get("set-cookie")!;
    expect(cookie).toStartWith(`__Host-siwe_session=${token}; Path=/;`);
    expect(cookie).toContain("; Secure");
    expect(cookie).not.toContain("Domain=");
    // The __Host- cookie is a credential like the plain one.
    const me = await get(app, "/v0/siwe/me", { cookie: `siwe_session=sess_unknown; ${cookie.split(";")[0]}` });
    expect(me.status).toBe(200);
    // Without a proxy configured, the header is the client's own word: ignored.
    const spoofed = await verify(await signedSignIn(app, accounts.alice), { "x-forwarded-proto": "https" });
    expect(spoofed.status).toBe(200);
    expect(spoofed.headers.get("set-cookie")).toStartWith("siwe_session=");
    expect(spoofed.headers.get("set-cookie")).not.toContain("Secure");
    for (const env of [{ TRUSTED_PROXY_HOPS: "1" }, { CLIENT_IP_HEADER: "Fly-Client-IP" }] as Record<
      string,
      string
    >[]) {
      const proxiedApp = apps({ env });
      const signed = await signedSignIn(proxiedApp, accounts.alice);
      const headers = {
        "x-forwarded-proto": "https",
        "x-forwarded-for": "203.0.113.9",
        "fly-client-ip": "203.0.113.9",
      };
      const proxied = await postJson(proxiedApp, "/v0/siwe/verify", signed, headers);
      expect(proxied.status, JSON.stringify(env)).toBe(200);
      expect(proxied.headers.get("set-cookie")).toStartWith("__Host-siwe_session=");
      expect(proxied.headers.get("set-cookie")).toContain("; Secure");
      const out = await postJson(
        proxiedApp,
        "/v0/siwe/logout",
        {},
        {
          ...headers,
          cookie: proxied.headers.get("set-cookie")!.split(";")[0]!,
        },
      );
      expect(out.headers.get("set-cookie")).toMatch(/^__Host-siwe_session=; .*Max-Age=0;.*Secure/);
    }
  });

  test("a replayed nonce is refused", async () => {
    const signed = await signedSignIn(app, accounts.alice);
    expect((await verify(signed)).status).toBe(200);
    await expect401(await verify(signed), "nonce");
  });

  test("two concurrent sign-ins with one nonce: exactly one session", async () => {
    const signed = await signedSignIn(app, accounts.bob);
    const statuses = (await Promise.all([verify(signed), verify(signed), verify(signed)])).map((r) => r.status);
    expect(statuses.sort()).toEqual([200, 401, 401]);
    const rows = await db.sql`select id from sessions where address = ${accounts.bob.address.toLowerCase()}`;
    expect(rows.length).toBe(1);
  });

  test("an expired nonce is refused", async () => {
    const nonce = await fetchNonce(app);
    await db.sql`update siwe_nonces set expires_at = now() - interval '1 second' where nonce = ${nonce}`;
    await expect401(await verify(await signedSignIn(app, accounts.alice, { nonce })), "nonce");
  });

  test("a nonce the service never issued is refused", async () => {
    await expect401(await verify(await signedSignIn(app, accounts.alice, { nonce: "a1b2c3d4e5f6a7b8c9" })), "nonce");
  });

  test("wrong domain: refused, and the nonce is spent by the attempt", async () => {
    const nonce = await fetchNonce(app);
    await expect401(await verify(await signedSignIn(app, accounts.alice, { nonce, domain: "evil.example" })), "domain");
    await expect401(await verify(await signedSignIn(app, accounts.alice, { nonce })), "nonce");
  });

  test("a URI off the domain is refused", async () => {
    const nonce = await fetchNonce(app);
    const message = siweMessage({ nonce, address: accounts.alice.address }).replace(
      "URI: http://localhost",
      "URI: https://evil.example/login",
    );
    expect(message).toContain("URI: https://evil.example/login");
    await expect401(await verify({ message, signature: await accounts.alice.signMessage({ message }) }), "URI");
  });

  test("SIWE_DOMAIN, when set, is the domain messages must name instead of the host", async () => {
    const pinned = apps({ env: { SIWE_DOMAIN: "app.example.com" } });
    const post = (body: unknown) => postJson(pinned, "/v0/siwe/verify", body);
    await expect401(await post(await signedSignIn(pinned, accounts.alice)), "app.example.com");
    const ok = await post(await signedSignIn(pinned, accounts.alice, { domain: "app.example.com" }));
    expect(ok.status).toBe(200);
  });

  test("the request's Host never replaces SIWE_DOMAIN", async () => {
    const signed = () => signedSignIn(app, accounts.alice, { domain: "api.example.com" });
    await expect401(await verify(await signed(), {}, "http://api.example.com"), "api.example.com");
    await expect401(await verify(await signed(), { host: "api.example.com" }), "api.example.com");
  });

  test("without SIWE_DOMAIN the message must name the request's host (service.md's default)", async () => {
    const open = new Elysia()
      .use(errorHandler)
      .use(siweRoutes({ sql: db.sql, config: loadConfig({ CHAIN_ID: "31337" }), chains }));
    const post = (body: unknown, base?: string) => postJson(open, "/v0/siwe/verify", body, {}, base);
    const forHost = (domain: string) => signedSignIn(open, accounts.alice, { domain });
    expect((await post(await forHost("api.example.com:8080"), "http://api.example.com:8080")).status).toBe(200);
    expect((await post(await forHost("localhost"))).status).toBe(200);
    await expect401(await post(await forHost("api.example.com")), 'this service is "localhost"');
  });

  test("the body is read as JSON when sent as text/plain (what fetch sends for a string) or with no type", async () => {
    // The app's parser (body-limit) in front of the routes, as createApp mounts it.
    const parsed = new Elysia()
      .use(bodyLimit())
      .use(errorHandler)
      .use(siweRoutes({ sql: db.sql, config: loadConfig({ CHAIN_ID: "31337", SIWE_DOMAIN: "localhost" }), chains }));
    const send = async (headers: Record<string, string>, wrap: (json: string) => BodyInit) =>
      parsed.handle(
        new Request("http://localhost/v0/siwe/verify", {
          method: "POST",
          headers,
          body: wrap(JSON.stringify(await signedSignIn(parsed, accounts.alice))),
        }),
      );
    expect((await send({ "content-type": "text/plain;charset=UTF-8" }, (j) => j)).status).toBe(200);
    // A Blob without a type: no content-type header at all.
    expect((await send({}, (j) => new Blob([j]))).status).toBe(200);
  });

  test("a chain the service does not serve is refused", async () => {
    await expect401(await verify(await signedSignIn(app, accounts.alice, { chainId: 1 })), "chain 1");
  });

  test("a signature by another key is refused, and the nonce is spent by the attempt", async () => {
    const nonce = await fetchNonce(app);
    const message = siweMessage({ nonce, address: accounts.alice.address });
    await expect401(await verify({ message, signature: await accounts.bob.signMessage({ message }) }), "signature");
    await expect401(await verify({ message, signature: await accounts.alice.signMessage({ message }) }), "nonce");
    const fresh = siweMessage({ nonce: await fetchNonce(app), address: accounts.alice.address });
    await expect401(await verify({ message: fresh, signature: "0x1234" }), "signature");
  });

  test("Issued At beyond the clock skew is refused; within it accepted", async () => {
    const future = new Date(Date.now() + (ISSUED_AT_SKEW_S + 600) * 1000);
    await expect401(await verify(await signedSignIn(app, accounts.alice, { issuedAt: future })), "Issued At");
    const slightly = new Date(Date.now() + 20_000);
    expect((await verify(await signedSignIn(app, accounts.alice, { issuedAt: slightly }))).status).toBe(200);
  });

  test("Expiration Time past is refused; a near one caps the session", async () => {
    const past = new Date(Date.now() - 1000);
    await expect401(await verify(await signedSignIn(app, accounts.alice, { expirationTime: past })), "expired");
    const soon = new Date(Math.floor(Date.now() / 1000) * 1000 + 300_000);
    const res = await verify(await signedSignIn(app, accounts.alice, { expirationTime: soon }));
    expect(res.status).toBe(200);
    expect(((await res.json()) as { expires_at: string }).expires_at).toBe(soon.toISOString());
    expect(res.headers.get("set-cookie")).toMatch(/Max-Age=(29\d|300);/);
  });

  test("Not Before in the future is refused", async () => {
    const later = new Date(Date.now() + 600_000);
    await expect401(await verify(await signedSignIn(app, accounts.alice, { notBefore: later })), "Not Before");
  });
});

describe("POST /v0/siwe/verify with a bad body: 400", () => {
  test.each([
    { label: "no message", body: { signature: "0x00" }, code: "missing_parameter", param: "message" },
    { label: "no signature", body: { message: "x" }, code: "missing_parameter", param: "signature" },
    {
      label: "not an EIP-4361 message",
      body: { message: "hello", signature: "0x00" },
      code: "invalid_parameter",
      param: "message",
    },
    {
      label: "a number as message",
      body: { message: 5, signature: "0x00" },
      code: "invalid_parameter",
      param: "message",
    },
    {
      label: "a 9000-character message",
      body: { message: "x".repeat(9000), signature: "0x00" },
      code: "invalid_parameter",
      param: "message",
    },
    {
      label: "a signature that is not hex",
      body: { message: "hi", signature: "not hex" },
      code: "invalid_parameter",
      param: "signature",
    },
    { label: "an array", body: [1, 2], code: "invalid_parameter", param: "body" },
    { label: "invalid JSON", body: "{not json", code: "invalid_parameter", param: "body" },
  ] as { label: string; body: unknown; code: string; param: string }[])(
    "$label → $code $param",
    async ({ body, code, param }) => {
      const res = await verify(body);
      expect(res.status).toBe(400);
      expect(await errorOf(res)).toMatchObject({ code, param });
    },
  );

  test("a message without the required lines names what is missing", async () => {
    const message = siweMessage({ nonce: await fetchNonce(app), address: accounts.alice.address }).replace(
      /\nChain ID: \d+/,
      "",
    );
    const res = await verify({ message, signature: await accounts.alice.signMessage({ message }) });
    expect(res.status).toBe(400);
    expect(await errorOf(res)).toMatchObject({ param: "message", message: expect.stringContaining("Chain ID") });
  });
});

describe("GET /v0/siwe/me and POST /v0/siwe/logout", () => {
  test("me: the session's address, chain and expiry, by Bearer or cookie", async () => {
    const res = await verify(await signedSignIn(app, accounts.carol));
    const { token, expires_at } = (await res.json()) as { token: string; expires_at: string };
    const expected = { address: accounts.carol.address.toLowerCase(), chain_id: 31337, expires_at };
    const byBearer = await get(app, "/v0/siwe/me", { authorization: `Bearer ${token}` });
    expect(byBearer.status).toBe(200);
    expect(await byBearer.json()).toEqual(expected);
    const cookie = res.headers.get("set-cookie")!.split(";")[0]!;
    expect(await (await get(app, "/v0/siwe/me", { cookie })).json()).toEqual(expected);
  });

  test("me: 401 without a session, and for an API key", async () => {
    await expect401(await get(app, "/v0/siwe/me"), "missing credential");
    const { key } = await createApiKey(db.sql, { merchant: accounts.carol.address });
    await expect401(await get(app, "/v0/siwe/me", { authorization: `Bearer ${key}` }), "SIWE session");
  });

  test("logout revokes the session and clears the cookie", async () => {
    const res = await verify(await signedSignIn(app, accounts.carol));
    const cookie = res.headers.get("set-cookie")!.split(";")[0]!;
    const out = await postJson(app, "/v0/siwe/logout", {}, { cookie });
    expect(out.status).toBe(200);
    expect(await out.json()).toEqual({ ok: true });
    expect(out.headers.get("set-cookie")).toMatch(/^siwe_session=; .*Max-Age=0;.*HttpOnly/);
    await expect401(await get(app, "/v0/siwe/me", { cookie }), "invalid");
    await expect401(await postJson(app, "/v0/siwe/logout", {}, { cookie }), "invalid");
  });
});

describe("contract wallets", () => {
  test("ERC-1271: a deployed wallet signs in through its owner's signature", async () => {
    const message = siweMessage({ nonce: await fetchNonce(app), address: deployedWallet });
    const res = await verify({ message, signature: await accounts.merchant2.signMessage({ message }) });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { address: string }).address).toBe(deployedWallet.toLowerCase());
  });

  test("ERC-1271: a signature by someone other than the owner is refused", async () => {
    const message = siweMessage({ nonce: await fetchNonce(app), address: deployedWallet });
    await expect401(await verify({ message, signature: await accounts.erin.signMessage({ message }) }), "signature");
  });

  test("ERC-6492: a wallet not deployed yet signs in with a wrapped signature", async () => {
    const salt = keccak256(toHex("counterfactual"));
    const wallet = walletAddress(accounts.dave.address, salt);
    const message = siweMessage({ nonce: await fetchNonce(app), address: wallet });
    const signature = serializeErc6492Signature({
      address: factory,
      data: encodeFunctionData({
        abi: testSmartWalletFactoryAbi,
        functionName: "deploy",
        args: [accounts.dave.address, salt],
      }),
      signature: await accounts.dave.signMessage({ message }),
    });
    const res = await verify({ message, signature });
    expect(res.status).toBe(200);
    expect(((await res.json()) as { address: string }).address).toBe(wallet.toLowerCase());
    // Verification simulated the deployment; nothing was sent to the chain.
    expect(await chains.get(31337)!.getCode({ address: wallet })).toBeUndefined();
  });

  test("without an RPC for the chain: plain wallets still sign in, contract wallets get a clear 401", async () => {
    const noRpc = apps({ chains: { defaultChainId: 31337, get: () => undefined, chainIds: () => [] } });
    const post = (body: unknown) => postJson(noRpc, "/v0/siwe/verify", body);
    expect((await post(await signedSignIn(noRpc, accounts.alice))).status).toBe(200);
    const message = siweMessage({ nonce: await fetchNonce(noRpc), address: deployedWallet });
    await expect401(await post({ message, signature: await accounts.merchant2.signMessage({ message }) }), "RPC");
  });

  test("when the RPC fails: plain wallets still sign in, contract wallets get 502", async () => {
    const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
    const deadUrl = `http://127.0.0.1:${server.port}`;
    server.stop(true);
    const dead = publicClientFor(deadUrl, 1000);
    const deadRpc = apps({
      chains: { defaultChainId: 31337, get: (id) => (id === 31337 ? dead : undefined), chainIds: () => [31337] },
    });
    const post = (body: unknown) => postJson(deadRpc, "/v0/siwe/verify", body);
    expect((await post(await signedSignIn(deadRpc, accounts.alice))).status).toBe(200);
    const nonce = await fetchNonce(deadRpc);
    const message = siweMessage({ nonce, address: deployedWallet });
    const res = await post({ message, signature: await accounts.merchant2.signMessage({ message }) });
    expect(res.status).toBe(502);
    const error = await errorOf(res);
    expect(error.code).toBe("chain_unavailable");
    expect(error.message).not.toContain(deadUrl);
    // The nonce was not consumed by the failed check.
    const [row] = await db.sql`select used_at from siwe_nonces where nonce = ${nonce}`;
    expect(row).toEqual({ used_at: null });
  });
});

describe("GET /v0/siwe/nonce writes a row: limited per client and in number (through the app)", () => {
  let s: SeededApp;
  // The rate limits' clock stands still: a slow machine's 60 requests must not refill the bucket meanwhile.
  const clock = { t: Date.now() };
  beforeAll(async () => {
    s = await startSeededApp({ CLIENT_IP_HEADER: "Fly-Client-IP" }, { now: () => clock.t });
  }, 60_000);
  afterAll(() => s?.close());

  const nonceFrom = (ip: string) => get(s.app, "/v0/siwe/nonce", { "fly-client-ip": ip });
  const rows = async () => (await s.db.sql<{ n: number }[]>`select count(*)::int as n from siwe_nonces`)[0]!.n;

  test("60 a minute per client: the 61st is a 429 with Retry-After that writes nothing; another client goes on", async () => {
    expect(NONCE_PER_MINUTE).toBe(60);
    for (let i = 0; i < 60; i++) expect((await nonceFrom("2001:db8:5:6::1")).status).toBe(200);
    const before = await rows();
    // Another address of the same /64 is the same client.
    const res = await nonceFrom("2001:db8:5:6::ffff");
    expect(res.status).toBe(429);
    expect(Number(res.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
    expect((await errorOf(res)).code).toBe("rate_limited");
    expect(await rows()).toBe(before);
    expect((await nonceFrom("2001:db8:5:7::1")).status).toBe(200);
    expect((await nonceFrom("192.0.2.9")).status).toBe(200);
    // A second later the client has one more.
    clock.t += 1_000;
    expect((await nonceFrom("2001:db8:5:6::1")).status).toBe(200);
    expect((await nonceFrom("2001:db8:5:6::1")).status).toBe(429);
  });

  test("at most 10,000 unspent nonces: a new one makes the oldest unspent go; spent ones stay", async () => {
    const sql = s.db.sql;
    await sql`delete from siwe_nonces`;
    // 9,999 unspent nonces, oldest first, and a spent one older than all of them.
    await sql`
      insert into siwe_nonces (nonce, expires_at, used_at)
      select 'seed' || lpad(g::text, 5, '0'), now() + make_interval(secs => g), null
      from generate_series(1, ${MAX_UNSPENT_NONCES - 1}) g`;
    await sql`insert into siwe_nonces (nonce, expires_at, used_at) values ('spent', now() - interval '1 second', now())`;
    const unspent = async () =>
      (await sql<{ n: number }[]>`select count(*)::int as n from siwe_nonces where used_at is null`)[0]!.n;
    const first = (await (await nonceFrom("192.0.2.10")).json()) as { nonce: string };
    expect(await unspent()).toBe(MAX_UNSPENT_NONCES);
    expect((await sql`select 1 from siwe_nonces where nonce = 'seed00001'`).length).toBe(1);
    const second = (await (await nonceFrom("192.0.2.11")).json()) as { nonce: string };
    expect(await unspent()).toBe(MAX_UNSPENT_NONCES);
    const kept = await sql<{ nonce: string }[]>`
      select nonce from siwe_nonces where nonce in ('seed00001', 'seed00002', 'spent', ${first.nonce}, ${second.nonce})
      order by nonce`;
    expect(kept.map((r) => r.nonce).sort()).toEqual([first.nonce, second.nonce, "seed00002", "spent"].sort());
  });
});
