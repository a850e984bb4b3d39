/** Keyset batches and the JSON array of a streamed list (src/http/stream.ts), over rows held in memory. */
import { expect, test } from "bun:test";
import { jsonArrayChunks, keysetBatches, StalledStreamError, type Position } from "../../src/http/stream";
import { drainUpTo } from "../../testkit/stream";

type Row = { block: number; id: string };
const rows: Row[] = Array.from({ length: 25 }, (_, i) => ({ block: i, id: `r"${i}\n` }));

/** Reads rows after `after` in chain order, logging each query's start. */
function source(log: string[]) {
  return async (after: Position | undefined, size: number): Promise<Row[]> => {
    const from = after ? Number(after.blockNumber) + 1 : 0;
    log.push(`read ${from}`);
    await Bun.sleep(1);
    return rows.slice(from, from + size);
  };
}
const position = (r: Row): Position => ({ blockNumber: String(r.block), logIndex: 0 });

test("the next chunk's query starts when a full chunk is handed out, before the consumer asks for it", async () => {
  const log: string[] = [];
  const batches = keysetBatches({ read: source(log), position, size: 10 });
  const first = await batches.next();
  expect(first.value!.length).toBe(10);
  log.push("consumer has chunk 1");
  expect(log).toEqual(["read 0", "read 10", "consumer has chunk 1"]);
  const all = [first.value!];
  for await (const b of batches) all.push(b);
  expect(all.map((b) => b.length)).toEqual([10, 10, 5]);
  expect(all.flat()).toEqual(rows);
  expect(log.filter((l) => l.startsWith("read"))).toEqual(["read 0", "read 10", "read 20"]);
});

test("a consumer that stops early leaves no unhandled read behind", async () => {
  const failing = async (after: Position | undefined): Promise<Row[]> => {
    if (after) throw new Error("the database went away");
    return rows.slice(0, 10);
  };
  const batches = keysetBatches({ read: failing, position, size: 10 });
  expect((await batches.next()).value!.length).toBe(10);
  await batches.return(undefined);
  await Bun.sleep(5);
});

test("a read that does not move past its start fails the batches instead of repeating rows without end", async () => {
  const sameRows = async () => rows.slice(0, 10);
  const backwards = async (after: Position | undefined) => {
    const from = after ? Math.max(0, Number(after.blockNumber) - 12) : 0;
    return rows.slice(from, from + 10);
  };
  expect(await drainUpTo(keysetBatches({ read: sameRows, position, size: 10 }))).toBeInstanceOf(StalledStreamError);
  expect(await drainUpTo(keysetBatches({ read: backwards, position, size: 10 }))).toBeInstanceOf(StalledStreamError);
  // A page read after a position must start past it.
  const after = { blockNumber: "5", logIndex: 0 };
  expect(await drainUpTo(keysetBatches({ read: sameRows, position, size: 10, after }))).toBeInstanceOf(
    StalledStreamError,
  );
  expect(await drainUpTo(keysetBatches({ read: source([]), position, size: 10, after }))).toBe("ended");
});

test("the JSON array is the bytes of one JSON.stringify of every record, in any chunking", async () => {
  const toRecord = (r: Row) => ({ id: r.id, n: r.block, none: null });
  let text = "";
  for await (const chunk of jsonArrayChunks(keysetBatches({ read: source([]), position, size: 7 }), toRecord)) {
    text += chunk;
  }
  expect(text).toBe(JSON.stringify(rows.map(toRecord)));
  let empty = "";
  for await (const chunk of jsonArrayChunks((async function* () {})(), toRecord)) empty += chunk;
  expect(empty).toBe("[]");
});
