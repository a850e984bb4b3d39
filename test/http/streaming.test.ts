/**
 * Lists without `limit` stream: a merchant with 50,000 records (and 3,000 allocations) read in keyset chunks. The
 * streamed body equals the paged reads concatenated, rows are read a chunk at a time as the client takes them, other requests are
 * answered mid-stream (PGlite's one session is not held), records above the snapshot block never appear, and a
 * failure after the first byte truncates the body instead of completing it.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { CHAIN_A, INDEXED_BLOCK_A, NOW_A, TOK, W } from "../../testkit/seed";
import { BIG, BIG_MODULE, seedBigMerchant } from "../../testkit/bulk";
import { parseCsvObjects } from "../../testkit/csv";
import { admin, startSeededApp, testConfig, type SeededApp } from "../../testkit/app";
import { createApp } from "../../src/http/app";
import { createChainRegistry } from "../../src/chain/clients";
import { RENDERED_CHUNK_ROWS, STREAM_CHUNK_ROWS } from "../../src/http/stream";

const RECORDS = 50_000;
const ALLOCATIONS = 3_000;

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
  await seedBigMerchant(s.db.sql, { activity: RECORDS, subscriptions: ALLOCATIONS });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

/** Starts a request and returns the response with a reader over its body. */
async function open(path: string, app: { handle: (r: Request) => Promise<Response> } = s.app) {
  const res = await app.handle(new Request(`http://localhost${path}`, { headers: admin }));
  expect(res.status).toBe(200);
  return { res, reader: res.body!.getReader() };
}

const decoder = new TextDecoder();

/** Reads the rest of a body as text. */
async function drain(reader: ReadableStreamDefaultReader<Uint8Array>, text = ""): Promise<string> {
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return text + decoder.decode();
    text += decoder.decode(value, { stream: true });
  }
}

/** Every page of `path` with `limit=1000`, following Link, concatenated. */
async function paged(path: string): Promise<unknown[]> {
  const out: unknown[] = [];
  let next: string | undefined = `${path}${path.includes("?") ? "&" : "?"}limit=1000`;
  while (next) {
    const page = await s.get(next);
    expect(page.status).toBe(200);
    out.push(...page.body);
    const link = page.headers.get("link");
    next = link
      ? new URL(/^<([^>]+)>/.exec(link)![1]!).pathname + new URL(/^<([^>]+)>/.exec(link)![1]!).search
      : undefined;
  }
  return out;
}

describe("a list without limit is streamed", () => {
  test("the activity log equals the paged reads concatenated, in both orders and for payments", async () => {
    for (const path of [`/v0/activity/${BIG}`, `/v0/activity/${BIG}?order=desc`, `/v0/payments/${BIG}`]) {
      const { res, reader } = await open(path);
      expect(res.headers.get("content-type")).toContain("application/json");
      expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
      expect(res.headers.get("x-request-id")).toMatch(/^req_/);
      expect(res.headers.get("link")).toBeNull();
      const body = JSON.parse(await drain(reader)) as { event_id: string; type: string }[];
      expect(body.length).toBe(path.includes("payments") ? Math.ceil(RECORDS / 3) : RECORDS);
      expect(body).toEqual((await paged(path)) as never);
      expect(new Set(body.map((r) => r.event_id)).size).toBe(body.length);
    }
  });

  test("filters, starting_after and failures stream too; a list of one chunk or less is a plain page", async () => {
    const all = (await s.get(`/v0/activity/${BIG}`)).body as { event_id: string; type: string; timestamp: string }[];
    const after = all[12_345]!.event_id;
    const rest = await s.get(`/v0/activity/${BIG}?starting_after=${after}`);
    expect(rest.body).toEqual(all.slice(12_346));
    const since = all[40_000]!.timestamp;
    expect((await s.get(`/v0/activity/${BIG}?since=${since}`)).body).toEqual(all.slice(40_000));
    const failures = await s.get(`/v0/failures/${BIG}`);
    expect(failures.body).toEqual(all.filter((r) => r.type === "FAIL"));
    const usdc = (await s.get(`/v0/activity/${BIG}?token=USDC&type=REFILL`)).body as unknown[];
    expect(usdc.length).toBeGreaterThan(STREAM_CHUNK_ROWS);
    expect(usdc).toEqual((await paged(`/v0/activity/${BIG}?token=USDC&type=REFILL`)) as never);
    // Exactly a chunk, and a chunk plus one: both complete.
    for (const n of [STREAM_CHUNK_ROWS, STREAM_CHUNK_ROWS + 1]) {
      const cut = all[all.length - n - 1]!.event_id;
      expect((await s.get(`/v0/activity/${BIG}?starting_after=${cut}`)).body).toEqual(all.slice(-n));
    }
  });

  test("the streamed bytes are the paged answers' bytes joined, JSON and CSV, in both orders", async () => {
    const paths = [
      `/v0/activity/${BIG}`,
      `/v0/activity/${BIG}?order=desc&format=csv`,
      `/v0/activity/${BIG}?format=csv&token=USDC`,
      `/v0/failures/${BIG}?order=desc`,
    ];
    for (const path of paths) {
      const csv = path.includes("csv");
      const streamed = await drain((await open(path)).reader);
      const pages: string[] = [];
      let next: string | undefined = `${path}${path.includes("?") ? "&" : "?"}limit=1000`;
      while (next) {
        const res = await s.app.handle(new Request(`http://localhost${next}`, { headers: admin }));
        expect(res.status).toBe(200);
        pages.push(await res.text());
        const link = res.headers.get("link");
        next = link
          ? new URL(/^<([^>]+)>/.exec(link)![1]!).pathname + new URL(/^<([^>]+)>/.exec(link)![1]!).search
          : undefined;
      }
      expect(pages.length).toBeGreaterThan(2);
      const header = csv ? pages[0]!.slice(0, pages[0]!.indexOf("\r\n") + 2) : "";
      const joined = csv
        ? header + pages.map((p) => p.slice(header.length)).join("")
        : "[" +
          pages
            .map((p) => p.slice(1, -1))
            .filter((p) => p !== "")
            .join(",") +
          "]";
      expect(streamed.length).toBe(joined.length);
      expect(streamed === joined).toBe(true);
    }
  });

  test("subscriptions equal the paged reads concatenated", async () => {
    for (const path of [`/v0/subscriptions/${BIG}`, `/v0/subscriptions/${BIG}?status=ACTIVE`]) {
      const { res, reader } = await open(path);
      expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
      const body = JSON.parse(await drain(reader)) as unknown[];
      expect(body).toEqual((await paged(path)) as never);
      if (!path.includes("status")) expect(body.length).toBe(ALLOCATIONS);
      else expect(body.length).toBeGreaterThan(STREAM_CHUNK_ROWS);
    }
  });

  test("CSV streams the same rows", async () => {
    const json = (await s.get(`/v0/activity/${BIG}`)).body as { event_id: string }[];
    const { res, reader } = await open(`/v0/activity/${BIG}?format=csv`);
    expect(res.headers.get("content-disposition")).toBe(`attachment; filename="activity-${BIG}-${CHAIN_A}.csv"`);
    const { rows } = parseCsvObjects(await drain(reader));
    expect(rows.map((r) => r.event_id)).toEqual(json.map((r) => r.event_id));
    const subs = parseCsvObjects(await drain((await open(`/v0/subscriptions/${BIG}?format=csv`)).reader));
    expect(subs.rows.length).toBe(ALLOCATIONS);
  });

  // The heap while such a stream flows is measured by `bun run bench/memory.ts`; here, what keeps it flat: the rows
  // are read one keyset chunk at a time (on a pool, a bounded number of chunks at once), and the next chunk only
  // once the client has taken the previous one.
  test("50,000 records flow a chunk at a time: a query per chunk, never more than `parallel` ahead of the client", async () => {
    const reads = { chunks: 0, ends: 0 };
    const counting = new Proxy(s.db.sql, {
      apply(target, self, args) {
        const strings = args[0] as unknown;
        const text = Array.isArray(strings) ? strings.join("?") : "";
        if (text.includes("string_agg(")) reads.chunks++;
        if (text.includes("with recursive e as")) reads.ends++;
        return Reflect.apply(target, self, args);
      },
    });
    // Half the pool (4 connections on Postgres); PGlite's one session reads one chunk at a time.
    const parallel = Math.max(1, Math.floor(s.db.sql.options.max / 2));
    const app = createApp({ sql: counting, config: testConfig(), chains: await createChainRegistry(testConfig()) });
    const { reader } = await open(`/v0/activity/${BIG}`, app);
    let taken = 0;
    let bytes = 0;
    let text = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      taken++;
      bytes += value.length;
      text += decoder.decode(value, { stream: true });
      expect(reads.chunks).toBeLessThanOrEqual(taken + parallel - 1);
    }
    console.log(
      `streamed ${RECORDS} records, ${(bytes / 1e6).toFixed(1)} MB in ${taken} chunks, ${reads.chunks} chunk ` +
        `queries, ${reads.ends} chunk-end queries, ${parallel} at once`,
    );
    expect(JSON.parse(text).length).toBe(RECORDS);
    // The first read (a chunk and one record, to tell a page from a stream), then one per rendered chunk.
    const chunks = Math.ceil((RECORDS - STREAM_CHUNK_ROWS - 1) / RENDERED_CHUNK_ROWS);
    expect(reads.chunks).toBe(chunks);
    expect(taken).toBeGreaterThanOrEqual(chunks + 1);
    // In parallel, the ends of 4 × parallel chunks per query, until a query finds fewer.
    const full = Math.floor((RECORDS - STREAM_CHUNK_ROWS - 1) / RENDERED_CHUNK_ROWS);
    expect(reads.ends).toBe(parallel > 1 ? Math.floor(full / (4 * parallel)) + 1 : 0);
  });

  test("another request is answered while a stream is paused mid-way", async () => {
    const { reader } = await open(`/v0/activity/${BIG}`);
    let text = decoder.decode((await reader.read()).value!, { stream: true });
    text += decoder.decode((await reader.read()).value!, { stream: true });
    const other = await Promise.race([
      s.get(`/v0/subscriptions/${BIG}?limit=2`),
      Bun.sleep(20_000).then(() => "no answer while the stream was open"),
    ]);
    expect(typeof other).toBe("object");
    expect((other as { status: number }).status).toBe(200);
    expect(JSON.parse(await drain(reader, text)).length).toBe(RECORDS);
  });

  test("records committed above the snapshot block after the first chunk are not streamed", async () => {
    const hash = "0x" + "f".repeat(64);
    const { res, reader } = await open(`/v0/activity/${BIG}`);
    const first = decoder.decode((await reader.read()).value!, { stream: true });
    try {
      await s.db.sql.begin(async (tx) => {
        await tx`insert into activity (chain_id, block_number, log_index, tx_hash, block_hash, block_time, merchant,
            module, subscription_id, type, token, amount, fee, reason, keeper)
          values (${CHAIN_A}, ${INDEXED_BLOCK_A + 1}, 0, ${hash}, ${hash}, ${new Date(NOW_A * 1000)}, ${BIG}, ${BIG_MODULE},
            '1', 'CHARGE', ${TOK.usdc}, '5', '1', null, ${W.keeper})`;
        await tx`update chains set indexed_block = ${INDEXED_BLOCK_A + 1} where chain_id = ${CHAIN_A}`;
      });
      const body = JSON.parse(await drain(reader, first)) as { event_id: string }[];
      expect(res.headers.get("x-indexed-block")).toBe(String(INDEXED_BLOCK_A));
      expect(body.length).toBe(RECORDS);
      expect(body.some((r) => r.event_id.includes(hash))).toBe(false);
    } finally {
      await s.db.sql.begin(async (tx) => {
        await tx`delete from activity where chain_id = ${CHAIN_A} and tx_hash = ${hash}`;
        await tx`update chains set indexed_block = ${INDEXED_BLOCK_A} where chain_id = ${CHAIN_A}`;
      });
    }
  });

  test("a failure after the first byte aborts the body over HTTP and is logged", async () => {
    const app = createApp({ sql: s.db.sql, config: testConfig(), chains: await createChainRegistry(testConfig()) });
    app.listen({ port: 0, hostname: "127.0.0.1" });
    const lines: string[] = [];
    const write = process.stdout.write.bind(process.stdout);
    process.stdout.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      lines.push(String(chunk));
      return (write as (...a: unknown[]) => boolean)(chunk, ...rest);
    }) as typeof process.stdout.write;
    let renamed = false;
    try {
      const res = await fetch(`http://127.0.0.1:${app.server!.port}/v0/activity/${BIG}`, { headers: admin });
      expect(res.status).toBe(200);
      const reader = res.body!.getReader();
      let text = decoder.decode((await reader.read()).value!, { stream: true });
      await s.db.sql`alter table activity rename to activity_gone`;
      renamed = true;
      let failed = false;
      try {
        text = await drain(reader, text);
      } catch {
        failed = true;
      }
      // Either the transfer errors or it ends short: never a complete array.
      expect(failed || !text.endsWith("]")).toBe(true);
      expect(() => JSON.parse(text)).toThrow();
      expect(lines.some((l) => l.includes("list stream aborted") && l.includes(BIG))).toBe(true);
    } finally {
      process.stdout.write = write;
      if (renamed) await s.db.sql`alter table activity_gone rename to activity`;
      await app.stop();
    }
    // The service is fine afterwards.
    expect((await s.get(`/v0/activity/${BIG}?limit=1`)).status).toBe(200);
  });
});
