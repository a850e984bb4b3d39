import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { PGlite } from "@electric-sql/pglite";
import {
  compilePglite,
  createDb,
  DataDirInUseError,
  pidAlive,
  SERVER_SESSION_SETTINGS,
  type Db,
} from "../../src/db/client";
import type { Logger } from "../../src/common/log";
import { createNotifier, type IndexedBatch } from "../../src/db/notify";
import { createTestDb, testDbKind } from "../../testkit/db";
import { until } from "../../testkit/cli";

let db: Db;

beforeAll(async () => {
  db = await createTestDb();
}, 60_000);

afterAll(async () => {
  await db?.close();
});

test(`int8 and numeric come back as exact strings (${testDbKind})`, async () => {
  const [r] = await db.sql<{ b: string; n: string; neg: string }[]>`
    select 9007199254740993::int8 as b, ${"115792089237316195423570985008687907853269984665640564039457584007913129639935"}::numeric(78,0) as n,
      (-1)::numeric(78,0) as neg`;
  expect(r.b).toBe("9007199254740993");
  expect(r.n).toBe("115792089237316195423570985008687907853269984665640564039457584007913129639935");
  expect(r.neg).toBe("-1");
});

test(`sessions on a Postgres server run with jit off; PGlite's keep its own settings (${testDbKind})`, async () => {
  expect(SERVER_SESSION_SETTINGS).toEqual({ jit: "off" });
  const connection = (db.sql.options as unknown as { connection: Record<string, string> }).connection;
  if (testDbKind === "postgres") {
    expect(connection.jit).toBe("off");
    // Every pooled connection, not only the first: several held at once.
    const settings = await Promise.all(
      Array.from({ length: 4 }, () => db.sql<{ jit: string }[]>`select current_setting('jit') as jit, pg_sleep(0.05)`),
    );
    expect(settings.map(([r]) => r!.jit)).toEqual(["off", "off", "off", "off"]);
  } else {
    expect(connection.jit).toBeUndefined();
  }
});

test("sql.begin rolls back every statement of a failed transaction", async () => {
  await db.sql`create table tx_probe (id int primary key)`;
  await expect(
    db.sql.begin(async (tx) => {
      await tx`insert into tx_probe values (1)`;
      await tx`insert into tx_probe values (1)`;
    }),
  ).rejects.toThrow();
  const rows = await db.sql`select * from tx_probe`;
  expect(rows.length).toBe(0);
});

test("the notifier delivers a committed batch to subscribers, and unsubscribe stops it", async () => {
  const notifier = createNotifier(db);
  const got: IndexedBatch[] = [];
  const unsubscribe = await notifier.subscribe((b) => got.push(b));
  const batch = { chainId: 31337, fromBlock: "10", toBlock: "12", reorg: false };
  await notifier.publish(batch);
  await until("the batch to be delivered", async () => got.length > 0);
  expect(got).toEqual([batch]);
  await unsubscribe();
  // A second subscriber as the witness: once it has the next batch, the first one would have had it too.
  const witness: IndexedBatch[] = [];
  const unsubscribeWitness = await notifier.subscribe((b) => witness.push(b));
  await notifier.publish({ ...batch, toBlock: "13" });
  await until("the witness to get the next batch", async () => witness.length > 0);
  await unsubscribeWitness();
  expect(witness).toEqual([{ ...batch, toBlock: "13" }]);
  expect(got.length).toBe(1);
});

test("unsubscribing while the database closes resolves: the LISTEN ends with its connection", async () => {
  const own = await createTestDb();
  const notifier = createNotifier(own);
  const unsubscribe = await notifier.subscribe(() => {});
  const closing = own.close();
  await unsubscribe();
  await closing;
});

test("an embedded data directory cannot be opened by a second process while in use", async () => {
  const dir = mkdtempSync(join(tmpdir(), "pglite-lock-"));
  const first = await createDb({ dataDir: dir });
  try {
    const child = Bun.spawn(
      [
        process.execPath,
        "-e",
        `import { createDb } from ${JSON.stringify(join(import.meta.dir, "../../src/db/client.ts"))};
         try { await createDb({ dataDir: ${JSON.stringify(dir)}, lockWaitMs: 500 }); console.log("opened"); process.exit(0); }
         catch (e) { console.log(e.name); process.exit(3); }`,
      ],
      { stdout: "pipe", stderr: "pipe" },
    );
    expect(await child.exited).toBe(3);
    expect(await new Response(child.stdout).text()).toContain(DataDirInUseError.name);
  } finally {
    await first.close();
  }
  // Closed: the directory opens again with its data.
  const again = await createDb({ dataDir: dir });
  const [r] = await again.sql<{ one: number }[]>`select 1 as one`;
  expect(r.one).toBe(1);
  await again.close();
}, 60_000);

test("embedded PGlite starts without zero-filling new WAL segments, and with a reader's smaller buffer pool", async () => {
  const dir = mkdtempSync(join(tmpdir(), "pglite-params-"));
  const writer = await createDb({ dataDir: dir });
  const [w] = await writer.sql<{ zero: string; buffers: string }[]>`
    select current_setting('wal_init_zero') as zero, current_setting('shared_buffers') as buffers`;
  await writer.close();
  expect(w).toEqual({ zero: "off", buffers: "128MB" });
  const reader = await createDb({ dataDir: dir, sharedBuffers: "16MB" });
  const [r] = await reader.sql<{ zero: string; buffers: string }[]>`
    select current_setting('wal_init_zero') as zero, current_setting('shared_buffers') as buffers`;
  await reader.close();
  expect(r).toEqual({ zero: "off", buffers: "16MB" });
}, 60_000);

test("PGlite's WebAssembly is compiled ahead, asynchronously: Postgres's module, and PGlite opens with it", async () => {
  const mod = await compilePglite();
  expect(mod).toBeInstanceOf(WebAssembly.Module);
  expect(WebAssembly.Module.exports(mod!).map((e) => e.name)).toContain("PostgresMainLoopOnce");
  const pg = await PGlite.create("memory://", { pgliteWasmModule: mod });
  try {
    expect((await pg.query<{ n: number }>("select 41 + 1 as n")).rows).toEqual([{ n: 42 }]);
  } finally {
    await pg.close();
  }
}, 60_000);

/** A data directory whose pid file names `pid`, as a process killed with `kill -9` leaves it. */
function heldBy(pid: number): string {
  const dir = mkdtempSync(join(tmpdir(), "pglite-holder-"));
  writeFileSync(join(dir, "owner.pid"), String(pid));
  return dir;
}

/** A logger that keeps its lines. */
function keptLog(): { log: Logger; lines: { level: string; msg: string; fields?: Record<string, unknown> }[] } {
  const lines: { level: string; msg: string; fields?: Record<string, unknown> }[] = [];
  return { log: (level, msg, fields) => lines.push({ level, msg, fields }), lines };
}

test("a start waits for a dying holder of the data directory, says so once, and opens it when it exits", async () => {
  const holder = Bun.spawn(["sleep", "2"]);
  const dir = heldBy(holder.pid);
  const { log, lines } = keptLog();
  const started = Date.now();
  const db = await createDb({ dataDir: dir, log });
  try {
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_500);
    expect(await holder.exited).toBe(0);
    const waits = lines.filter((l) => l.msg.includes("waiting for it to exit"));
    expect(waits).toHaveLength(1);
    expect(waits[0]!.fields).toMatchObject({ pid: holder.pid, dataDir: dir });
    const [r] = await db.sql<{ one: number }[]>`select 1 as one`;
    expect(r!.one).toBe(1);
  } finally {
    await db.close();
  }
}, 30_000);

test("a holder that stays alive is refused after the wait", async () => {
  const holder = Bun.spawn(["sleep", "30"]);
  try {
    const dir = heldBy(holder.pid);
    const { log, lines } = keptLog();
    const started = Date.now();
    const err = await createDb({ dataDir: dir, lockWaitMs: 1_000, log }).catch((e) => e);
    expect(err).toBeInstanceOf(DataDirInUseError);
    expect((err as Error).message).toContain(`is in use by process ${holder.pid}`);
    expect(Date.now() - started).toBeGreaterThanOrEqual(1_000);
    expect(lines).toHaveLength(1);
  } finally {
    holder.kill();
  }
}, 30_000);

test("a zombie holder (exited, never reaped by its parent) counts as gone", async () => {
  // The shell starts a short child, prints its pid, then becomes `sleep`, which never reaps it: a zombie.
  const parent = Bun.spawn(["sh", "-c", "sleep 0.1 & echo $!; exec sleep 30"], { stdout: "pipe" });
  try {
    const reader = parent.stdout.getReader();
    const zombie = Number(new TextDecoder().decode((await reader.read()).value).trim());
    let state = "";
    for (let i = 0; i < 100 && state !== "Z"; i++) {
      await Bun.sleep(20);
      const stat = await Bun.file(`/proc/${zombie}/stat`).text();
      state = stat.slice(stat.lastIndexOf(")") + 2, stat.lastIndexOf(")") + 3);
    }
    expect(state).toBe("Z");
    expect(() => process.kill(zombie, 0)).not.toThrow(); // the signal check alone would call it alive
    expect(pidAlive(zombie)).toBe(false);
    const { log, lines } = keptLog();
    const db = await createDb({ dataDir: heldBy(zombie), lockWaitMs: 1_000, log });
    await db.close();
    expect(lines).toHaveLength(0);
  } finally {
    parent.kill();
  }
}, 30_000);
