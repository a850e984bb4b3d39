/** Endpoint secrets at rest: HKDF-derived key, endpoint id as associated data, the first format still opened and resealed. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import type { Db } from "../../src/db/client";
import { loadConfig } from "../../src/common/config";
import { createLogger, type Logger } from "../../src/common/log";
import { createApiKey } from "../../src/auth/api-keys";
import { createChainRegistry } from "../../src/chain/clients";
import { createNotifier } from "../../src/db/notify";
import { createApp } from "../../src/http/app";
import { createEndpoint } from "../../src/webhooks/endpoints";
import { createDispatcher, dispatcherConfig, type DispatcherConfig } from "../../src/webhooks/dispatcher";
import { SecretKeyError } from "../../src/webhooks/errors";
import { newSecret, openSecret, sealSecret, sealStoredSecrets, secureStoredSecrets } from "../../src/webhooks/secrets";
import { sendTest } from "../../src/webhooks/test-delivery";
import { startSeededApp, testConfig, type SeededApp } from "../../testkit/app";
import { until } from "../../testkit/cli";
import { createTestDb, testDbKind } from "../../testkit/db";
import { CHAIN_A } from "../../testkit/seed";
import { startReceiver, type Receiver } from "../../testkit/webhooks";

const KEY = "a-webhook-secret-key-of-the-operator";
const MERCHANT = "0x00000000000000000000000000000000000000e5";

/** A secret sealed as the first version did: AES-256-GCM under SHA-256 of the key, no associated data. */
function sealedTheOldWay(secret: string, secretKey: string): string {
  const iv = randomBytes(12);
  const cipher = createCipheriv("aes-256-gcm", createHash("sha256").update(secretKey).digest(), iv);
  const body = Buffer.concat([cipher.update(secret, "utf8"), cipher.final(), cipher.getAuthTag()]);
  return `enc:${iv.toString("base64")}:${body.toString("base64")}`;
}

describe("sealSecret and openSecret", () => {
  test("round trip; another endpoint id, another key or no key does not open it", () => {
    const secret = newSecret();
    const sealed = sealSecret(secret, KEY, "we_1");
    expect(sealed).toStartWith("enc2:");
    expect(sealed).not.toContain(secret.slice(6));
    expect(openSecret(sealed, KEY, "we_1")).toBe(secret);
    expect(() => openSecret(sealed, KEY, "we_2")).toThrow(SecretKeyError);
    expect(() => openSecret(sealed, `${KEY}x`, "we_1")).toThrow(SecretKeyError);
    expect(() => openSecret(sealed, undefined, "we_1")).toThrow(SecretKeyError);
    expect(sealSecret(secret, undefined, "we_1")).toBe(secret);
  });

  test("the key is derived with HKDF, not the first format's SHA-256 of the variable", () => {
    const sealed = sealSecret(newSecret(), KEY, "we_1");
    const [, iv, data] = sealed.split(":");
    const raw = Buffer.from(data!, "base64");
    const decipher = createDecipheriv(
      "aes-256-gcm",
      createHash("sha256").update(KEY).digest(),
      Buffer.from(iv!, "base64"),
    );
    decipher.setAAD(Buffer.from("we_1"));
    decipher.setAuthTag(raw.subarray(raw.length - 16));
    decipher.update(raw.subarray(0, raw.length - 16));
    expect(() => decipher.final()).toThrow();
  });

  test("a secret sealed the old way still opens", () => {
    const secret = newSecret();
    expect(openSecret(sealedTheOldWay(secret, KEY), KEY, "we_any")).toBe(secret);
  });
});

describe(`sealStoredSecrets and start-up (${testDbKind})`, () => {
  let db: Db;
  let receiver: Receiver;
  beforeAll(async () => {
    db = await createTestDb();
    receiver = startReceiver();
  }, 60_000);
  afterAll(async () => {
    await receiver?.stop();
    await db?.close();
  });

  /** An endpoint stored with these secrets, as older versions (or a process without the key) left it. */
  async function stored(id: string, secret: string, previous: string | null) {
    await db.sql`
      insert into webhook_endpoints (id, merchant, url, event_types, secret, previous_secret, previous_secret_expires_at)
      values (${id}, ${MERCHANT}, ${receiver.url}, ${["*"]}, ${secret}, ${previous},
        ${previous ? new Date(Date.now() + 3_600_000) : null})`;
  }

  test("clear and first-format secrets are resealed once, even by two processes at once; what they seal opens", async () => {
    const clear = newSecret();
    const old = newSecret();
    const previous = newSecret();
    await stored("we_000000000000000000000001", clear, null);
    await stored("we_000000000000000000000002", sealedTheOldWay(old, KEY), previous);
    await stored("we_000000000000000000000003", sealedTheOldWay(newSecret(), "another-key-entirely!"), null);
    const [a, b] = await Promise.all([sealStoredSecrets(db.sql, KEY), sealStoredSecrets(db.sql, KEY)]);
    expect(a.sealed + b.sealed).toBe(2);
    expect(a.unreadable + b.unreadable).toBeGreaterThanOrEqual(1);
    const rows = await db.sql<{ id: string; secret: string; previous_secret: string | null }[]>`
      select id, secret, previous_secret from webhook_endpoints order by id`;
    expect(rows[0]!.secret).toStartWith("enc2:");
    expect(openSecret(rows[0]!.secret, KEY, rows[0]!.id)).toBe(clear);
    expect(rows[1]!.secret).toStartWith("enc2:");
    expect(openSecret(rows[1]!.secret, KEY, rows[1]!.id)).toBe(old);
    expect(openSecret(rows[1]!.previous_secret!, KEY, rows[1]!.id)).toBe(previous);
    expect(rows[2]!.secret).toStartWith("enc:"); // not this key's: left alone
    expect(JSON.stringify(rows)).not.toContain(clear.slice(6));
    // Idempotent: nothing left to do.
    expect((await sealStoredSecrets(db.sql, KEY)).sealed).toBe(0);
    await db.sql`delete from webhook_endpoints where id = 'we_000000000000000000000003'`;
  });

  test("a delivery of an endpoint sealed with the key verifies with the secret shown at creation", async () => {
    const config = dispatcherConfig(loadConfig({ WEBHOOK_SECRET_KEY: KEY, WEBHOOK_ALLOW_PRIVATE_URLS: "1" }));
    const ep = await createEndpoint(
      db.sql,
      { merchant: MERCHANT, url: receiver.url, eventTypes: ["*"], description: null },
      config.secretKey,
    );
    const [row] = await db.sql<{ secret: string }[]>`select secret from webhook_endpoints where id = ${ep.id}`;
    expect(row!.secret).toStartWith("enc2:");
    const attempt = await sendTest(db.sql, { id: ep.id, merchant: MERCHANT, chainId: 31337 }, config);
    expect(attempt.status).toBe("succeeded");
    const got = receiver.received.at(-1)!;
    expect(() => new Webhook(ep.secret).verify(got.body, got.headers)).not.toThrow();
  });

  test("start-up warns on every start in production without the key; with it, it reseals and says how many", async () => {
    const lines: { level: string; msg: string }[] = [];
    const log: Logger = (level, msg) => lines.push({ level, msg });
    await stored("we_000000000000000000000004", newSecret(), null);
    for (let i = 0; i < 2; i++) await secureStoredSecrets(db.sql, { production: true, log });
    await secureStoredSecrets(db.sql, { production: false, log });
    expect(lines.filter((l) => l.level === "warn" && l.msg.includes("WEBHOOK_SECRET_KEY is not set"))).toHaveLength(2);
    expect(lines.filter((l) => l.level === "warn")).toHaveLength(2);
    await secureStoredSecrets(db.sql, { secretKey: KEY, production: true, log });
    expect(lines.at(-1)!.msg).toContain("encrypted");
    const [row] = await db.sql<
      { secret: string }[]
    >`select secret from webhook_endpoints where id = 'we_000000000000000000000004'`;
    expect(row!.secret).toStartWith("enc2:");
  });
});

describe(`WEBHOOK_SECRET_KEY through the API and the dispatcher (${testDbKind})`, () => {
  const OTHER_KEY = "another-webhook-secret-key-entirely";
  const EVENT = `evt_${"e5".repeat(20)}`;
  let s: SeededApp;
  let receiver: Receiver;
  let apiKey: string;
  /** The endpoint made through the API, and the two secrets the API showed for it (at creation, at rotation). */
  let id: string;
  let shown: { created: string; rotated: string };

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_SECRET_KEY: KEY, WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    apiKey = (await createApiKey(s.db.sql, { merchant: MERCHANT })).key;
    receiver = startReceiver();
    await s.db.sql`
      insert into merchant_events (id, chain_id, merchant, type, block_number, log_index, ts, data)
      values (${EVENT}, ${CHAIN_A}, ${MERCHANT}, 'charge.succeeded', 100, 0, now(), ${s.db.sql.json({ object: { n: 1 } })})`;
  }, 60_000);
  afterAll(async () => {
    await receiver?.stop();
    await s?.close();
  });

  /** Sends a request through the app (`s.app` unless told) with the merchant's API key; the parsed JSON answer. */
  async function call(method: string, path: string, body?: unknown, app: SeededApp["app"] = s.app) {
    const headers: Record<string, string> = { authorization: `Bearer ${apiKey}` };
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await app.handle(
      new Request(`http://localhost${path}`, {
        method,
        headers,
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    return { status: res.status, body: (await res.json()) as any };
  }

  const storedRow = async () =>
    (
      await s.db.sql<{ secret: string; previous_secret: string | null }[]>`
        select secret, previous_secret from webhook_endpoints where id = ${id}`
    )[0]!;

  /** A stored value in the sealed format that contains none of the secrets, nor their base64 part. */
  function expectSealed(stored: string | null, secrets: string[]) {
    expect(stored).toStartWith("enc2:");
    for (const secret of secrets) {
      expect(stored).not.toContain(secret);
      expect(stored).not.toContain(secret.slice("whsec_".length));
    }
  }

  /**
   * Redelivers the event to the endpoint through the API and runs a dispatcher with `config` (a process with its own
   * WEBHOOK_SECRET_KEY) until that delivery's first attempt is recorded; the delivery row.
   */
  async function deliverOnce(config: DispatcherConfig, log: Logger) {
    const res = await call("POST", `/v0/events/${MERCHANT}/${EVENT}/redeliver`, { endpoint_id: id });
    expect(res).toEqual({ status: 200, body: { enqueued: 1 } });
    const [{ delivery }] = await s.db.sql<[{ delivery: string }]>`
      select id as delivery from webhook_deliveries where endpoint_id = ${id} order by created_at desc, id limit 1`;
    const d = createDispatcher({
      sql: s.db.sql,
      log,
      config: { ...config, pollIntervalMs: 50, retrySchedule: [3600] },
    });
    await d.start();
    try {
      return await until("the attempt", async () => {
        const [row] = await s.db.sql<{ attempts: number; status: string; error: string | null }[]>`
          select attempts, status, error from webhook_deliveries where id = ${delivery}`;
        return row && row.attempts >= 1 && (row.status !== "pending" || row.error) ? row : undefined;
      });
    } finally {
      await d.stop();
    }
  }

  test("create and rotate store both secrets sealed, they open to the secrets shown, the overlap signs with both", async () => {
    const created = await call("POST", `/v0/webhook_endpoints/${MERCHANT}`, { url: receiver.url });
    expect(created.status).toBe(201);
    id = created.body.id;
    const first = created.body.secret as string;
    const row = await storedRow();
    expectSealed(row.secret, [first]);
    expect(openSecret(row.secret, KEY, id)).toBe(first);
    expect(row.previous_secret).toBeNull();

    const rotated = await call("POST", `/v0/webhook_endpoints/${MERCHANT}/${id}/rotate_secret`);
    expect(rotated.status).toBe(200);
    const second = rotated.body.secret as string;
    shown = { created: first, rotated: second };
    const after = await storedRow();
    expectSealed(after.secret, [first, second]);
    expectSealed(after.previous_secret, [first, second]);
    expect(openSecret(after.secret, KEY, id)).toBe(second);
    expect(openSecret(after.previous_secret!, KEY, id)).toBe(first);

    const before = receiver.received.length;
    const delivery = await deliverOnce(
      dispatcherConfig(s.config),
      createLogger("error", () => {}),
    );
    expect(delivery).toMatchObject({ attempts: 1, status: "succeeded", error: null });
    const got = receiver.received.slice(before);
    expect(got).toHaveLength(1);
    const signatures = got[0]!.signature.split(" ");
    expect(signatures).toHaveLength(2);
    const verifies = (secret: string, signature: string) => {
      try {
        new Webhook(secret).verify(got[0]!.body, { ...got[0]!.headers, "webhook-signature": signature });
        return true;
      } catch {
        return false;
      }
    };
    // Each signature verifies with exactly one of the secrets shown, and each secret with one of them.
    const matched = signatures.map((sig) => [first, second].filter((secret) => verifies(secret, sig)));
    expect(matched.map((m) => m.length)).toEqual([1, 1]);
    expect(matched.flat().sort()).toEqual([first, second].sort());
  }, 60_000);

  for (const [process, secretKey] of [
    ["another WEBHOOK_SECRET_KEY", OTHER_KEY],
    ["no WEBHOOK_SECRET_KEY", undefined],
  ] as const) {
    test(`a dispatcher started with ${process}: the attempt fails unsent, saying the secret cannot be opened, and an error line names the endpoint`, async () => {
      const lines: string[] = [];
      const log = createLogger("debug", (line) => lines.push(line));
      const env: Record<string, string> = { WEBHOOK_ALLOW_PRIVATE_URLS: "1" };
      if (secretKey) env.WEBHOOK_SECRET_KEY = secretKey;
      const before = receiver.received.length;
      const delivery = await deliverOnce(dispatcherConfig(testConfig(env)), log);
      expect(receiver.received.length).toBe(before); // nothing unsigned or wrongly signed went out
      expect(delivery.attempts).toBe(1);
      expect(delivery.status).toBe("pending"); // retried later: a process with the right key delivers it
      expect(delivery.error).toMatch(/^SecretKeyError: .*cannot be opened/);
      expect(delivery.error).toContain(id);
      const errors = lines.map((l) => JSON.parse(l)).filter((l) => l.level === "error");
      expect(errors.some((l) => l.endpoint_id === id && /cannot be opened/.test(l.msg + l.err))).toBe(true);
      const written = lines.join("\n") + delivery.error;
      for (const secret of [shown.created, shown.rotated]) {
        expect(written).not.toContain(secret);
        expect(written).not.toContain(secret.slice("whsec_".length));
      }
      expect(written).not.toContain(KEY);
      if (secretKey) expect(written).not.toContain(secretKey);
    }, 60_000);
  }

  test("POST …/test on an app started with another WEBHOOK_SECRET_KEY answers the failed attempt (not a 500) and sends nothing", async () => {
    const config = testConfig({ WEBHOOK_SECRET_KEY: OTHER_KEY, WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    const lines: string[] = [];
    const other = createApp({
      sql: s.db.sql,
      config,
      chains: await createChainRegistry(config),
      notifier: createNotifier(s.db),
      log: createLogger("debug", (line) => lines.push(line)),
    });
    const before = receiver.received.length;
    const res = await call("POST", `/v0/webhook_endpoints/${MERCHANT}/${id}/test`, undefined, other);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ event_type: "webhook.test", attempt: 1, status: "failed", response_status: null });
    expect(res.body.error).toMatch(/^SecretKeyError: .*cannot be opened/);
    expect(receiver.received.length).toBe(before);
    // Recorded as that one failed attempt: no lease left behind for a dispatcher to send again.
    const [row] = await s.db.sql<{ status: string; attempts: number; lease_until: Date | null }[]>`
      select status, attempts, lease_until from webhook_deliveries where id = ${res.body.id}`;
    expect(row).toMatchObject({ status: "failed", attempts: 1 });
    expect(JSON.stringify([res.body, lines])).not.toContain(shown.rotated.slice("whsec_".length));
  }, 60_000);

  test("a process started with another WEBHOOK_SECRET_KEY, or none, logs at start an error naming the endpoint; the right key logs none", async () => {
    for (const secretKey of [OTHER_KEY, undefined, KEY]) {
      const lines: string[] = [];
      const log = createLogger("debug", (line) => lines.push(line));
      await secureStoredSecrets(s.db.sql, { secretKey, production: false, log });
      const errors = lines.map((l) => JSON.parse(l)).filter((l) => l.level === "error");
      if (secretKey === KEY) {
        expect(errors).toEqual([]);
        continue;
      }
      expect(errors).toHaveLength(1);
      expect(errors[0]).toMatchObject({ endpoints: 1, endpoint_ids: [id] });
      expect(errors[0].msg).toContain("cannot be opened");
      for (const secret of [shown.created, shown.rotated]) {
        expect(lines.join("\n")).not.toContain(secret.slice("whsec_".length));
      }
    }
  });
});
