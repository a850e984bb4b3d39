import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { createPublicClient, fallback, http, stringToHex } from "viem";
import { publicClientFor } from "../../src/chain/clients";
import { RangeRefusedError, RpcUnavailableError } from "../../src/chain/errors";
import { splitFetched } from "../../src/indexer/fetch";
import { getLogs, RangeSizer, type RetryPolicy } from "../../src/chain/rpc";
import { decodeDecimals, decodeSymbol } from "../../src/indexer/tokens";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

// A node that answers every request with the canned reply of the current case.
let reply: { status: number; body: unknown; delayMs?: number } = { status: 200, body: {} };
let server: ReturnType<typeof Bun.serve>;
let requests = 0;

beforeAll(() => {
  server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: async (req) => {
      requests++;
      const { id } = (await req.json()) as { id: number };
      if (reply.delayMs) await Bun.sleep(reply.delayMs);
      const body = reply.body && typeof reply.body === "object" ? { jsonrpc: "2.0", id, ...reply.body } : reply.body;
      return new Response(typeof body === "string" ? body : JSON.stringify(body), { status: reply.status });
    },
  });
});

afterAll(() => server?.stop(true));

const quick = { attempts: 3, baseMs: 1, maxMs: 2 };

async function refusalOf(
  code: number,
  message: string,
  status = 200,
  policy: RetryPolicy = quick,
): Promise<RangeRefusedError | Error> {
  reply = { status, body: status === 200 ? { error: { code, message } } : message };
  const client = publicClientFor(`http://127.0.0.1:${server.port}`);
  try {
    await getLogs(client, { address: ["0x0000000000000000000000000000000000000001"] }, 0x10n, 0x4000n, policy);
  } catch (err) {
    return err as Error;
  }
  throw new Error("expected a failure");
}

describe("eth_getLogs refusals from real providers' wording", () => {
  test("Alchemy's size limit with a suggested range", async () => {
    const err = await refusalOf(
      -32602,
      "Log response size exceeded. You can make eth_getLogs requests with up to a 2K block range and no limit on the " +
        "response size, or you can request any block range with a cap of 10K logs in the response. Based on your " +
        "parameters, this block range should work: [0x10, 0x2a]",
    );
    expect(err).toBeInstanceOf(RangeRefusedError);
    expect((err as RangeRefusedError).suggestedSize).toBe(0x2an - 0x10n + 1n);
  });

  test("result-count limits are 'results' refusals; block-span limits carry the span", async () => {
    const infura = (await refusalOf(-32005, "query returned more than 10000 results")) as RangeRefusedError;
    expect([infura.name, infura.kind]).toEqual(["RangeRefusedError", "results"]);
    const quicknode = (await refusalOf(-32614, "eth_getLogs is limited to a 10,000 range")) as RangeRefusedError;
    expect([quicknode.kind, quicknode.suggestedSize]).toEqual(["blocks", 10_000n]);
    const geth = (await refusalOf(-32000, "exceed maximum block range: 5000")) as RangeRefusedError;
    expect([geth.kind, geth.suggestedSize]).toEqual(["blocks", 5_000n]);
    const ankr = (await refusalOf(-32600, "block range is too wide")) as RangeRefusedError;
    expect([ankr.name, ankr.kind]).toEqual(["RangeRefusedError", "blocks"]);
    const huge = await refusalOf(0, "Payload Too Large", 413);
    expect(huge).toBeInstanceOf(RangeRefusedError);
  });

  test("behind a non-plain transport, viem's response-size guard shrinks the span to what fits", async () => {
    reply = { status: 200, body: { result: Array.from({ length: 100 }, () => ({ data: "0x" + "00".repeat(40) })) } };
    const client = createPublicClient({
      transport: fallback([http(`http://127.0.0.1:${server.port}`, { retryCount: 0, maxResponseBodySize: 1000 })]),
    });
    const err = await getLogs(client, {}, 0n, 999n, quick).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RangeRefusedError);
    const size = (err as RangeRefusedError).suggestedSize!;
    expect(size > 0n && size < 100n).toBe(true); // 1000 blocks answered with ~10 kB against a 1 kB limit
    expect((err as RangeRefusedError).kind).toBe("results");
  });

  test("a range that times out twice is refused as too heavy, so a smaller one is asked", async () => {
    reply = { status: 200, body: { result: [] }, delayMs: 300 };
    const client = publicClientFor(`http://127.0.0.1:${server.port}`, 100);
    const err = await getLogs(client, {}, 0n, 99n, quick).catch((e: unknown) => e);
    reply = { status: 200, body: {} };
    expect(err).toBeInstanceOf(RangeRefusedError);
    expect([(err as RangeRefusedError).kind, (err as RangeRefusedError).suggestedSize]).toEqual(["results", 50n]);
  });

  test("rate limits and server errors are retried, not read as range refusals", async () => {
    // A 429 costs no attempt: it is sat out `throttles` times on top of the attempts.
    const throttled = { ...quick, throttles: 1 };
    for (const [code, message, status] of [
      [-32005, "daily request count exceeded, request rate limited", 200],
      [0, "Too Many Requests", 429],
      [-32603, "internal error", 200],
      [0, "bad gateway", 502],
    ] as const) {
      const before = requests;
      const err = await refusalOf(code, message, status, throttled);
      expect(err).toBeInstanceOf(RpcUnavailableError);
      const rateLimited = /rate limited|Too Many/.test(message);
      expect(requests - before).toBe(quick.attempts + (rateLimited ? throttled.throttles : 0));
    }
  });
});

describe("splitting a dense answer into write batches", () => {
  const log = (block: number, i: number, address = "0xp") =>
    ({
      address,
      topics: [],
      data: "0x",
      blockNumber: `0x${block.toString(16)}`,
      logIndex: `0x${i.toString(16)}`,
    }) as never;

  test("cuts at block boundaries, never inside a block, covering the whole range", () => {
    const processorLogs = [log(10, 0), log(10, 1), log(11, 0), log(12, 0), log(12, 1), log(12, 2), log(15, 0)];
    const moduleLogs = [log(11, 1, "0xm"), log(15, 1, "0xm")];
    const parts = splitFetched({ from: 5n, to: 20n, processorLogs, moduleLogs, queried: "all" }, 3);
    expect(parts.map((p) => [p.from, p.to, p.processorLogs.length + p.moduleLogs.length])).toEqual([
      [5n, 10n, 2],
      [11n, 11n, 2],
      [12n, 14n, 3],
      [15n, 20n, 2],
    ]);
    expect(splitFetched({ from: 5n, to: 20n, processorLogs, moduleLogs, queried: "all" }, 100)).toHaveLength(1);
  });
});

describe("RangeSizer", () => {
  test("grows while answers are small and shrinks toward the target when they are big", () => {
    const s = new RangeSizer(100n, 10_000n, 1000);
    s.success(100n, 10);
    expect(s.size).toBe(200n);
    s.success(200n, 4000);
    expect(s.size).toBe(50n);
    s.success(10n, 0); // a short final range says nothing
    expect(s.size).toBe(50n);
  });

  test("after a refusal the span shrinks, never grows back to a refused span, nor asks a refused range again", () => {
    const s = new RangeSizer(1000n, 100_000n, 1000);
    s.refusal(0n, 999n, new RangeRefusedError("too wide", "blocks"));
    expect(s.size).toBe(500n);
    for (let i = 0; i < 20; i++) s.success(s.size, 0);
    expect(s.size < 1000n).toBe(true);
    const t = new RangeSizer(64n, 1000n, 1000);
    t.refusal(10n, 73n, new RangeRefusedError("too many", "results"));
    t.success(32n, 0); // grows back to 64
    expect(t.nextTo(10n, 1000n)).toBe(41n); // [10, 73] was refused: ask half of it
    t.refusal(0n, 63n, new RangeRefusedError("hint", "blocks", 10n));
    expect(t.size).toBe(10n);
  });

  test("proportional: the next span is sized from the last one's density, at most four times as wide", () => {
    const s = new RangeSizer(50n, 100_000n, 8000, true);
    s.success(50n, 2000); // 40 logs a block: 200 blocks hold 8,000
    expect(s.size).toBe(200n);
    s.success(200n, 0); // empty: four times as wide, not the whole chain at once
    expect(s.size).toBe(800n);
    s.success(800n, 6400); // 8 a block: 1,000 blocks
    expect(s.size).toBe(1000n);
    s.success(1000n, 80_000); // a dense stretch (an uncapped node answers it all): back to 100
    expect(s.size).toBe(100n);
    s.success(100n, 7999); // close to the target: about the same span
    expect(s.size).toBe(100n);
  });
});

describe("token metadata decoding", () => {
  test("string and bytes32 symbols, out-of-range decimals", () => {
    const abiString =
      "0x0000000000000000000000000000000000000000000000000000000000000020" +
      "0000000000000000000000000000000000000000000000000000000000000004" +
      stringToHex("USDC", { size: 32 }).slice(2);
    expect(decodeSymbol(abiString)).toBe("USDC");
    expect(decodeSymbol(stringToHex("MKR", { size: 32 }))).toBe("MKR");
    expect(decodeSymbol(null)).toBeNull();
    expect(decodeSymbol("0x1234")).toBeNull();
    expect(decodeDecimals(`0x${"0".repeat(62)}12`)).toBe(18);
    expect(decodeDecimals(`0x${"0".repeat(61)}100`)).toBeNull();
    expect(decodeDecimals(null)).toBeNull();
  });
});
