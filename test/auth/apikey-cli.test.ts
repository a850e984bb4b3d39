/** `bun run apikey` spawned for real against the test database (a Postgres database, or a PGlite data dir). */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { findApiKey, listApiKeys } from "../../src/auth/api-keys";
import { createDb, type Db } from "../../src/db/client";
import { accounts } from "../../testkit/accounts";
import { createTestDb, testDbKind } from "../../testkit/db";
import { runCommand } from "../../testkit/cli";

const merchant = accounts.merchant.address.toLowerCase();

let db: Db | undefined;
let dataDir: string | undefined;
let env: Record<string, string | undefined>;

/** Runs the CLI to completion. */
const cli = (...args: string[]) => runCommand("src/cli/apikey.ts", env, ...args);

/** The database the CLI wrote to (PGlite: opened only while no CLI runs). */
async function withDb<T>(fn: (db: Db) => Promise<T>): Promise<T> {
  if (db) return fn(db);
  const pglite = await createDb({ dataDir: dataDir! });
  try {
    return await fn(pglite);
  } finally {
    await pglite.close();
  }
}

beforeAll(async () => {
  const { DATABASE_URL: _, ...rest } = process.env;
  if (testDbKind === "postgres") {
    db = await createTestDb();
    env = { ...rest, DATABASE_URL: db.url };
  } else {
    dataDir = mkdtempSync(join(tmpdir(), "apikey-cli-"));
    env = { ...rest, DATA_DIR: dataDir };
  }
}, 60_000);

afterAll(async () => {
  await db?.close();
  if (dataDir) rmSync(dataDir, { recursive: true, force: true });
});

describe("arguments are checked before the database is opened; errors go to stderr with exit code 1", () => {
  test.each([
    { args: [], out: "usage:", code: 0 },
    { args: ["create"], err: "--merchant", code: 1 },
    { args: ["create", "--merchant"], err: "--merchant needs a value", code: 1 },
    { args: ["create", "--merchant", "0x1234"], err: "not an address", code: 1 },
    { args: ["create", "--merchant", merchant, "--color"], err: "unknown option --color", code: 1 },
    { args: ["create", "--merchant", merchant, "extra"], err: "unexpected argument extra", code: 1 },
    { args: ["revoke"], err: "exactly one key id", code: 1 },
    { args: ["revoke", "--json", "x"], err: "revoke takes no --json", code: 1 },
    { args: ["list", "--merchant", "nope"], err: "not an address", code: 1 },
    { args: ["rotate"], err: 'unknown command "rotate"', code: 1 },
  ] as { args: string[]; err?: string; out?: string; code: number }[])(
    "apikey $args",
    async ({ args, err, out, code }) => {
      const r = await cli(...args);
      expect(r.code).toBe(code);
      if (err) {
        expect(r.stderr).toContain(err);
        expect(r.stdout).toBe("");
      }
      if (out) expect(r.stdout).toContain(out);
    },
  );
});

test("create, list, revoke against the service's database", async () => {
  const json = await cli("create", "--merchant", accounts.merchant.address, "--label", "ci", "--json");
  expect(json.stderr).toBe("");
  expect(json.code).toBe(0);
  const lines = json.stdout.trim().split("\n");
  expect(lines.length).toBe(1);
  const created = JSON.parse(lines[0]!) as { id: string; key: string; merchant: string };
  expect(Object.keys(created)).toEqual(["id", "key", "merchant"]);
  expect(created.merchant).toBe(merchant);
  expect(created.key).toStartWith("sk_live_");

  const human = await cli("create", "--merchant", merchant);
  expect(human.code).toBe(0);
  const secondKey = /(sk_live_\S+)/.exec(human.stdout)?.[1];
  expect(secondKey).toBeDefined();
  const secondId = /(key_[0-9a-f]{20})/.exec(human.stdout)![1]!;

  const revoked = await cli("revoke", secondId);
  expect(revoked.code).toBe(0);
  expect(revoked.stdout).toContain(`revoked API key ${secondId}`);
  const again = await cli("revoke", secondId);
  expect(again.code).toBe(1);
  expect(again.stderr).toContain(`no active API key with id ${secondId}`);

  const list = await cli("list", "--merchant", merchant, "--json");
  expect(list.code).toBe(0);
  const listed = JSON.parse(list.stdout) as { id: string; revoked_at: string | null; label: string | null }[];
  expect(listed.map((k) => [k.id, k.label, k.revoked_at === null])).toEqual([
    [created.id, "ci", true],
    [secondId, null, false],
  ]);
  expect(list.stdout).not.toContain(created.key);
  expect(list.stdout).not.toContain(secondKey!);

  await withDb(async (d) => {
    expect(await findApiKey(d.sql, created.key)).toEqual({ id: created.id, merchant, chainId: null });
    expect(await findApiKey(d.sql, secondKey!)).toBeNull();
    const rows = await d.sql`select * from api_keys`;
    expect(JSON.stringify(rows)).not.toContain(created.key);
    expect((await listApiKeys(d.sql, merchant)).length).toBe(2);
  });
}, 180_000);
