/**
 * The activity log rendered several chunks at once (renderedChunksInParallel in src/http/stream.ts): over rows held in
 * memory, the bytes and order equal the sequential scan's whatever the chunking, at most `parallel` reads run, rows
 * that move between the ends query and the reads are neither lost nor repeated, and a consumer that stops waits for
 * the reads in flight; over the app (a pool on Postgres, the sequential path on PGlite), the streamed bytes equal
 * the paged answers joined with chunk ends at exact multiples of the chunk size, and a client that disconnects
 * leaves no query running.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { BIG, seedBigMerchant } from "../../testkit/bulk";
import { admin, startSeededApp, type SeededApp } from "../../testkit/app";
import { testDbKind } from "../../testkit/db";
import {
  RENDERED_CHUNK_ROWS,
  STREAM_CHUNK_ROWS,
  renderedChunks,
  renderedChunksInParallel,
  StalledStreamError,
  takeChunkSlots,
  type Position,
  type RenderedChunk,
} from "../../src/http/stream";
import { drainUpTo } from "../../testkit/stream";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** An in-memory log: rows 0, 10, …, 10(n-1), each at the block of its value, rendered as that value, read in keyset chunks led by ",". */
function memoryLog(n: number) {
  const rows = Array.from({ length: n }, (_, i) => i * 10);
  const log = { reads: 0, running: 0, maxRunning: 0, ends: 0 };
  const from = (after: Position) => rows.findIndex((r) => r > Number(after.blockNumber));
  const at = (r: number): Position => ({ blockNumber: String(r), logIndex: 0 });
  const chunk = (part: number[]): RenderedChunk =>
    part.length === 0
      ? { texts: [], rows: 0, last: undefined }
      : { texts: [encoder.encode("," + part.join(","))], rows: part.length, last: at(part[part.length - 1]!) };
  const start = (after: Position) => (from(after) < 0 ? rows.length : from(after));
  return {
    rows,
    log,
    first: (size: number): RenderedChunk => ({
      ...chunk(rows.slice(0, size)),
      texts: [encoder.encode(rows.slice(0, size).join(","))],
    }),
    read: async (after: Position, size: number): Promise<RenderedChunk> => {
      log.reads++;
      log.maxRunning = Math.max(log.maxRunning, ++log.running);
      await Bun.sleep(1);
      log.running--;
      const i = start(after);
      return chunk(rows.slice(i, i + size));
    },
    ends: async (after: Position, size: number, count: number): Promise<Position[]> => {
      log.ends++;
      await Bun.sleep(1);
      const i = start(after);
      const out: Position[] = [];
      for (let k = 1; k <= count && i + k * size - 1 < rows.length; k++) out.push(at(rows[i + k * size - 1]!));
      return out;
    },
  };
}

async function text(chunks: AsyncGenerator<Uint8Array>): Promise<string> {
  let out = "";
  for await (const c of chunks) out += decoder.decode(c);
  return out;
}

describe("renderedChunksInParallel over rows in memory", () => {
  test("the same bytes as the sequential scan, at chunk ends on and off multiples of the chunk size", async () => {
    const size = 4;
    const first = 5;
    // Nothing after the first chunk, one row, exact multiples of the chunk size, one more, one less.
    for (const rest of [0, 1, 3, 4, 5, 8, 12, 13, 31, 32, 33]) {
      for (const parallel of [1, 2, 3]) {
        for (const endsAtOnce of [1, 2, 5]) {
          const m = memoryLog(first + rest);
          const expected = "[" + m.rows.join(",") + "]";
          const sequential = await text(renderedChunks({ first: m.first(first), read: m.read, size, close: "]" }));
          expect("[" + sequential).toBe(expected);
          const parallelText = await text(
            renderedChunksInParallel({
              first: m.first(first),
              read: m.read,
              ends: m.ends,
              size,
              parallel,
              endsAtOnce,
              close: "]",
            }),
          );
          expect("[" + parallelText).toBe(expected);
        }
      }
    }
  });

  test("at most `parallel` reads at once, and one chunk read per chunk of rows", async () => {
    const m = memoryLog(5 + 40);
    const out = await text(
      renderedChunksInParallel({ first: m.first(5), read: m.read, ends: m.ends, size: 4, parallel: 3, close: "" }),
    );
    expect(out.split(",").length).toBe(45);
    expect(m.log.maxRunning).toBe(3);
    // 10 full chunks, then the empty read that proves the end.
    expect(m.log.reads).toBe(11);
    expect(m.log.ends).toBe(Math.floor(10 / 12) + 1);
  });

  test("rows written or removed between the ends query and the reads are neither lost nor repeated", async () => {
    for (const change of ["insert", "delete"] as const) {
      const m = memoryLog(5 + 40);
      let changed = false;
      const ends = async (after: Position, size: number, count: number) => {
        const found = await m.ends(after, size, count);
        if (!changed) {
          changed = true;
          // After the ends are known: a row appears (or goes) inside the second chunk.
          if (change === "insert") m.rows.splice(12, 0, 115);
          else m.rows.splice(12, 1);
        }
        return found;
      };
      const out = await text(
        renderedChunksInParallel({ first: m.first(5), read: m.read, ends, size: 4, parallel: 2, close: "" }),
      );
      expect(out).toBe(m.rows.join(","));
    }
  });

  test("a consumer that stops early waits for the reads in flight; a failed read fails the stream", async () => {
    const m = memoryLog(5 + 40);
    const chunks = renderedChunksInParallel({
      first: m.first(5),
      read: m.read,
      ends: m.ends,
      size: 4,
      parallel: 3,
      close: "",
    });
    await chunks.next();
    await chunks.next();
    expect(m.log.running).toBeGreaterThan(0);
    await chunks.return(undefined);
    expect(m.log.running).toBe(0);

    const failing = renderedChunksInParallel({
      first: m.first(5),
      read: async (after, size) => {
        if (Number(after.blockNumber) > 100) throw new Error("the database went away");
        return m.read(after, size);
      },
      ends: m.ends,
      size: 4,
      parallel: 2,
      close: "",
    });
    await expect(text(failing)).rejects.toThrow("the database went away");
  });

  test("a read that does not move past its start fails the stream instead of repeating rows without end", async () => {
    const m = memoryLog(5 + 40);
    // Keyset bugs: the position ignored (the same rows again), the order reversed (rows before the start).
    const sameRows = async (_after: Position, size: number) => m.read({ blockNumber: "40", logIndex: 0 }, size);
    const backwards = async (after: Position, size: number) =>
      m.read({ blockNumber: String(Math.max(0, Number(after.blockNumber) - 80)), logIndex: 0 }, size);
    for (const read of [sameRows, backwards]) {
      expect(await drainUpTo(renderedChunks({ first: m.first(5), read, size: 4, close: "" }))).toBeInstanceOf(
        StalledStreamError,
      );
      for (const parallel of [1, 3]) {
        const chunks = renderedChunksInParallel({
          first: m.first(5),
          read,
          ends: m.ends,
          size: 4,
          parallel,
          close: "",
        });
        expect(await drainUpTo(chunks)).toBeInstanceOf(StalledStreamError);
      }
    }
    // The guard lets a correct stream through, ascending and descending.
    expect(await drainUpTo(renderedChunks({ first: m.first(5), read: m.read, size: 4, close: "" }))).toBe("ended");
    const down = [9, 8, 7, 6, 5, 4, 3, 2, 1, 0];
    const descending = async (after: Position, size: number): Promise<RenderedChunk> => {
      const part = down.filter((r) => r < Number(after.blockNumber)).slice(0, size);
      const last = part[part.length - 1];
      return {
        texts: [encoder.encode("," + part.join(","))],
        rows: part.length,
        last: last === undefined ? undefined : { blockNumber: String(last), logIndex: 0 },
      };
    };
    const top: RenderedChunk = { texts: [encoder.encode("9,8")], rows: 2, last: { blockNumber: "8", logIndex: 0 } };
    expect(await text(renderedChunks({ first: top, read: descending, size: 3, close: "" }))).toBe(
      "9,8,7,6,5,4,3,2,1,0",
    );
  });

  test("the streams over a pool hold at most half of it; PGlite's one session reads one chunk at a time", () => {
    const pool = {};
    const a = takeChunkSlots(pool, 4);
    expect(a.parallel).toBe(2);
    const b = takeChunkSlots(pool, 4);
    expect(b.parallel).toBe(1);
    a.release();
    a.release();
    const c = takeChunkSlots(pool, 4);
    expect(c.parallel).toBe(2);
    c.release();
    expect(takeChunkSlots({}, 1).parallel).toBe(1);
    expect(takeChunkSlots({}, 100).parallel).toBe(4);
  });
});

// A first chunk (1,001 records) and three rendered chunks exactly.
const RECORDS = STREAM_CHUNK_ROWS + 1 + 3 * RENDERED_CHUNK_ROWS;

let s: SeededApp;
beforeAll(async () => {
  s = await startSeededApp();
  await seedBigMerchant(s.db.sql, { activity: RECORDS, subscriptions: 10 });
}, 60_000);
afterAll(async () => {
  await s?.close();
});

/** The body of `path` as text. */
async function body(path: string): Promise<string> {
  const res = await s.app.handle(new Request(`http://localhost${path}`, { headers: admin }));
  expect(res.status).toBe(200);
  return res.text();
}

/** Every page of `path` with `limit=1000`, following Link, joined into one document's bytes. */
async function pagedDocument(path: string): Promise<string> {
  const pages: string[] = [];
  let next: string | undefined = `${path}${path.includes("?") ? "&" : "?"}limit=1000`;
  while (next) {
    const res = await s.app.handle(new Request(`http://localhost${next}`, { headers: admin }));
    expect(res.status).toBe(200);
    pages.push(await res.text());
    const link = res.headers.get("link");
    const url = link ? new URL(/^<([^>]+)>/.exec(link)![1]!) : undefined;
    next = url ? url.pathname + url.search : undefined;
  }
  if (path.includes("format=csv")) {
    const header = pages[0]!.slice(0, pages[0]!.indexOf("\r\n") + 2);
    return header + pages.map((p) => p.slice(header.length)).join("");
  }
  return (
    "[" +
    pages
      .map((p) => p.slice(1, -1))
      .filter((p) => p !== "")
      .join(",") +
    "]"
  );
}

describe(`the activity log streamed over the app (${testDbKind})`, () => {
  test("the streamed bytes are the paged answers joined: both orders, filters, CSV", async () => {
    for (const path of [
      `/v0/activity/${BIG}`,
      `/v0/activity/${BIG}?order=desc`,
      `/v0/activity/${BIG}?format=csv`,
      `/v0/activity/${BIG}?order=desc&format=csv&token=WETH`,
      `/v0/activity/${BIG}?type=CHARGE&order=desc`,
      `/v0/payments/${BIG}?format=csv`,
    ]) {
      const streamed = await body(path);
      expect(streamed === (await pagedDocument(path))).toBe(true);
    }
    expect((JSON.parse(await body(`/v0/activity/${BIG}`)) as unknown[]).length).toBe(RECORDS);
  });

  test("lists ending at, just before and just after a multiple of the chunk size; empty and one-record lists", async () => {
    const all = JSON.parse(await body(`/v0/activity/${BIG}`)) as { event_id: string }[];
    // After the first read (a chunk and one record), 0, 1, one chunk less one, one chunk, one chunk plus one, two.
    const rest = [0, 1, RENDERED_CHUNK_ROWS - 1, RENDERED_CHUNK_ROWS, RENDERED_CHUNK_ROWS + 1, 2 * RENDERED_CHUNK_ROWS];
    for (const n of rest.map((r) => STREAM_CHUNK_ROWS + 1 + r)) {
      for (const order of ["asc", "desc"] as const) {
        const ordered = order === "asc" ? all : [...all].reverse();
        const cut = ordered[ordered.length - n - 1]!.event_id;
        const path = `/v0/activity/${BIG}?order=${order}&starting_after=${cut}`;
        const streamed = await body(path);
        expect((JSON.parse(streamed) as { event_id: string }[]).map((r) => r.event_id)).toEqual(
          ordered.slice(-n).map((r) => r.event_id),
        );
        expect(streamed === (await pagedDocument(path))).toBe(true);
      }
    }
    const last = all[all.length - 1]!.event_id;
    expect(await body(`/v0/activity/${BIG}?starting_after=${last}`)).toBe("[]");
    const one = JSON.parse(await body(`/v0/activity/${BIG}?starting_after=${all[all.length - 2]!.event_id}`));
    expect(one).toEqual([all[all.length - 1]]);
  });

  test("a client that disconnects mid-stream leaves no query running and the pool usable", async () => {
    s.app.listen({ port: 0, hostname: "127.0.0.1" });
    try {
      for (const format of ["json", "csv"]) {
        const abort = new AbortController();
        const res = await fetch(`http://127.0.0.1:${s.app.server!.port}/v0/activity/${BIG}?format=${format}`, {
          headers: admin,
          signal: abort.signal,
        });
        expect(res.status).toBe(200);
        const reader = res.body!.getReader();
        await reader.read();
        abort.abort();
        await reader.read().catch(() => {});
        if (testDbKind === "postgres") {
          // The server notices the closed socket, cancels the body and waits for its reads: poll for that.
          const deadline = Date.now() + 10_000;
          let running = -1;
          while (running !== 0 && Date.now() < deadline) {
            const [row] = await s.db.sql<{ n: number }[]>`
              select count(*)::int as n from pg_stat_activity
              where datname = current_database() and state = 'active' and pid <> pg_backend_pid()`;
            running = row!.n;
            if (running !== 0) await Bun.sleep(20);
          }
          expect(running).toBe(0);
        }
        // The pool answers, and a whole stream still goes through.
        expect((await s.get(`/v0/activity/${BIG}?limit=1`)).status).toBe(200);
        expect((JSON.parse(await body(`/v0/activity/${BIG}?format=json`)) as unknown[]).length).toBe(RECORDS);
      }
    } finally {
      await s.app.stop();
    }
  });
});
