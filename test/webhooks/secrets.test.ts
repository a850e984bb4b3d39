/** Endpoint secrets at rest: HKDF-derived key, endpoint id as associated data, the first format still opened and resealed. */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { createCipheriv, createDecipheriv, createHash, randomBytes } from "node:crypto";
import { Webhook } from "standardwebhooks";
import type { Db } from "../../src/db/client";
import { loadConfig } from "../../src/common/config";
import type { Logger } from "../../src/common/log";
import { createEndpoint } from "../../src/webhooks/endpoints";
import { dispatcherConfig } from "../../src/webhooks/dispatcher";
import { SecretKeyError } from "../../src/webhooks/errors";
import { newSecret, openSecret, sealSecret, sealStoredSecrets, secureStoredSecrets } from "../../src/webhooks/secrets";
import { sendTest } from "../../src/webhooks/test-delivery";
import { createTestDb, testDbKind } from "../../testkit/db";
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
    expect(lines).toHaveLength(2);
    await secureStoredSecrets(db.sql, { secretKey: KEY, production: true, log });
    expect(lines.at(-1)!.msg).toContain("encrypted");
    const [row] = await db.sql<
      { secret: string }[]
    >`select secret from webhook_endpoints where id = 'we_000000000000000000000004'`;
    expect(row!.secret).toStartWith("enc2:");
  });
});
