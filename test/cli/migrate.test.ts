/** `bun run migrate`: applies every migration once, then nothing; bad configuration exits 1. */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { listMigrations } from "../../src/db/migrate";
import { spawnBun } from "../../testkit/cli";

const base = process.env.DATABASE_URL;
const name = `migrate_${Date.now().toString(36)}_${Math.random().toString(36).slice(2, 6)}`;
let dataDir: string;
let admin: postgres.Sql | undefined;
let env: Record<string, string>;

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "migrate-test-"));
  env = { DATA_DIR: dataDir };
  if (base) {
    admin = postgres(base, { max: 1, onnotice: () => {} });
    await admin.unsafe(`create database ${name}`);
    const url = new URL(base);
    url.pathname = `/${name}`;
    env = { DATABASE_URL: url.toString() };
  }
}, 60_000);

afterAll(async () => {
  rmSync(dataDir, { recursive: true, force: true });
  await admin?.unsafe(`drop database if exists ${name} with (force)`);
  await admin?.end();
}, 60_000);

test("applies every migration once, then none", async () => {
  const first = spawnBun(["migrate"], env);
  expect(await first.exited).toBe(0);
  const applied = JSON.parse(first.output().trim().split("\n").at(-1)!) as { applied: string[] };
  expect(applied.applied).toEqual(listMigrations().map((m) => m.name));
  expect(applied.applied).toContain("0005_create_keeper_claims.sql");

  const second = spawnBun(["migrate"], env);
  expect(await second.exited).toBe(0);
  expect(JSON.parse(second.output().trim().split("\n").at(-1)!)).toEqual({ applied: [] });
}, 60_000);

test("a bad DATABASE_URL exits 1 with the variable's name", async () => {
  const child = spawnBun(["migrate"], { DATABASE_URL: "mysql://nope" });
  expect(await child.exited).toBe(1);
  expect(child.output()).toContain("DATABASE_URL");
}, 60_000);
