/**
 * A hosted RPC provider in front of anvil, as tests and benches meet one: latency per HTTP request, compute units per
 * method (a batch costs the sum), a budget of compute units per second answered with HTTP 429 + `Retry-After` beyond
 * it (throttled calls are not billed), at most `maxLogs` logs per `eth_getLogs` answer (refused with the range that
 * fits, in Alchemy's words), at most `maxBatch` calls per batch, and logs without `blockTimestamp` unless kept. Its
 * WebSocket (`wsUrl`, anvil's behind it) bills calls by method and every byte it pushes at 0.04 CU, as providers bill
 * subscriptions; a test can cut the sockets and refuse new ones.
 */
import { ALCHEMY_CU, DEFAULT_CU } from "../src/chain/budget";
import { WS_CU_PER_BYTE } from "../src/chain/ws";

/** The provider's profile; change fields at any time. */
export type ProviderProfile = {
  latencyMs: number;
  cuPerSecond: number;
  burstCu: number;
  maxLogs: number;
  maxBatch: number;
  stripBlockTimestamp: boolean;
};

/** The bench's "hosted" profile (Alchemy's free tier). */
export const HOSTED: ProviderProfile = {
  latencyMs: 60,
  cuPerSecond: 330,
  burstCu: 660,
  maxLogs: 10_000,
  maxBatch: 100,
  stripBlockTimestamp: true,
};

/** What the provider saw. */
export type ProviderStats = {
  httpRequests: number;
  calls: number;
  computeUnits: number;
  throttled: number;
  rangeRefusals: number;
  batchRefusals: number;
  byMethod: Record<string, { calls: number; cu: number }>;
  /** `eth_getLogs` asked, as "from-to" or the block hash. */
  getLogs: string[];
  /** The address filter of each `eth_getLogs` in `getLogs` (lowercase, comma-separated; "" when none). */
  getLogsAddresses: string[];
  /** Block numbers asked with `eth_getBlockByNumber` (hex or tag). */
  headers: string[];
  /** Messages and bytes pushed to WebSocket clients (billed in `computeUnits` as `eth_subscription`). */
  wsMessages: number;
  wsBytes: number;
};

/** A running provider proxy. */
export type ProviderProxy = {
  url: string;
  /** The WebSocket endpoint (anvil's, behind the same profile). */
  wsUrl: string;
  /** Whether WebSocket connections are accepted (true); false answers new ones 503. */
  acceptSockets: boolean;
  /** Closes every open WebSocket (its client sees the connection drop); returns how many. */
  dropSockets(): number;
  profile: ProviderProfile;
  stats: ProviderStats;
  reset(): void;
  stop(): void;
};

type Call = { jsonrpc?: string; id?: unknown; method: string; params?: unknown[] };

const hex = (n: bigint) => `0x${n.toString(16)}`;
const fresh = (): ProviderStats => ({
  httpRequests: 0,
  calls: 0,
  computeUnits: 0,
  throttled: 0,
  rangeRefusals: 0,
  batchRefusals: 0,
  byMethod: {},
  getLogs: [],
  getLogsAddresses: [],
  headers: [],
  wsMessages: 0,
  wsBytes: 0,
});

type Socket = { upstream: WebSocket | null; queue: string[] };

/** Starts the proxy on a free loopback port. */
export function startProviderProxy(upstream: string, profile: Partial<ProviderProfile> = {}): ProviderProxy {
  const p: ProviderProfile = { ...HOSTED, ...profile };
  const state: ProviderProxy = {
    url: "",
    wsUrl: "",
    acceptSockets: true,
    profile: p,
    stats: fresh(),
    dropSockets: () => 0,
    reset: () => {},
    stop: () => {},
  };
  let tokens = p.burstCu;
  let last = performance.now();
  const cuOf = (m: string) => ALCHEMY_CU[m] ?? DEFAULT_CU;
  const bill = (method: string, cu: number) => {
    const s = (state.stats.byMethod[method] ??= { calls: 0, cu: 0 });
    s.calls++;
    s.cu += cu;
  };
  const sockets = new Set<import("bun").ServerWebSocket<Socket>>();
  const upstreamWs = upstream.replace(/^http/, "ws");
  const server = Bun.serve<Socket>({
    hostname: "127.0.0.1",
    port: 0,
    idleTimeout: 60,
    websocket: {
      open(ws) {
        sockets.add(ws);
        const up = new WebSocket(upstreamWs);
        ws.data.upstream = up;
        up.onopen = () => ws.data.queue.splice(0).forEach((m) => up.send(m));
        up.onmessage = (ev) => {
          const text = String(ev.data);
          const bytes = Buffer.byteLength(text);
          const cu = bytes * WS_CU_PER_BYTE;
          state.stats.wsMessages++;
          state.stats.wsBytes += bytes;
          state.stats.computeUnits += cu;
          tokens -= cu; // pushed whatever the budget: later calls wait for it
          bill("eth_subscription", cu);
          setTimeout(() => ws.readyState === 1 && ws.send(text), p.latencyMs / 2);
        };
        up.onclose = () => ws.close();
      },
      message(ws, message) {
        const text = String(message);
        let calls: Call[] = [];
        try {
          const body = JSON.parse(text) as Call | Call[];
          calls = Array.isArray(body) ? body : [body];
        } catch {
          // forwarded as is: the node answers the parse error
        }
        for (const c of calls) {
          state.stats.calls++;
          state.stats.computeUnits += cuOf(String(c?.method));
          bill(String(c?.method), cuOf(String(c?.method)));
        }
        const up = ws.data.upstream;
        setTimeout(() => (up?.readyState === 1 ? up.send(text) : ws.data.queue.push(text)), p.latencyMs / 2);
      },
      close(ws) {
        sockets.delete(ws);
        ws.data.upstream?.close();
      },
    },
    async fetch(req, srv) {
      if (req.headers.get("upgrade")?.toLowerCase() === "websocket") {
        if (!state.acceptSockets) return new Response("unavailable", { status: 503 });
        if (srv.upgrade(req, { data: { upstream: null, queue: [] } })) return undefined;
        return new Response("upgrade failed", { status: 400 });
      }
      const text = await req.text();
      let body: Call | Call[];
      try {
        body = JSON.parse(text);
      } catch {
        return Response.json({ jsonrpc: "2.0", id: null, error: { code: -32700, message: "parse error" } });
      }
      const stats = state.stats;
      const calls = Array.isArray(body) ? body : [body];
      stats.httpRequests++;
      if (calls.length > p.maxBatch) {
        stats.batchRefusals++;
        const message = `batch too large: at most ${p.maxBatch} requests per batch`;
        return Response.json({ jsonrpc: "2.0", id: null, error: { code: -32600, message } });
      }
      const cost = calls.reduce((n, c) => n + cuOf(String(c?.method)), 0);
      const now = performance.now();
      tokens = Math.min(p.burstCu, tokens + ((now - last) / 1000) * p.cuPerSecond);
      last = now;
      if (tokens < cost) {
        stats.throttled++;
        const error = { code: 429, message: "Your app has exceeded its compute units per second capacity." };
        const out = Array.isArray(body)
          ? calls.map((c) => ({ jsonrpc: "2.0", id: c?.id ?? null, error }))
          : { jsonrpc: "2.0", id: body.id ?? null, error };
        return Response.json(out, { status: 429, headers: { "retry-after": "1" } });
      }
      tokens -= cost;
      stats.calls += calls.length;
      stats.computeUnits += cost;
      for (const c of calls) {
        bill(c.method, cuOf(c.method));
        const q = c.params?.[0] as
          | { fromBlock?: string; toBlock?: string; blockHash?: string; address?: string | string[] }
          | string
          | undefined;
        if (c.method === "eth_getLogs" && q && typeof q === "object") {
          stats.getLogs.push(q.blockHash ?? `${BigInt(q.fromBlock ?? "0x0")}-${BigInt(q.toBlock ?? "0x0")}`);
          stats.getLogsAddresses.push([q.address ?? []].flat().join(",").toLowerCase());
        }
        if (c.method === "eth_getBlockByNumber") stats.headers.push(String(q));
      }
      if (p.latencyMs > 0) await Bun.sleep(p.latencyMs);
      const up = await fetch(upstream, { method: "POST", headers: { "content-type": "application/json" }, body: text });
      const answer = (await up.json()) as { id?: unknown; result?: unknown; error?: unknown };
      const answers = Array.isArray(answer) ? answer : [answer];
      const byId = new Map(calls.map((c) => [c.id, c]));
      for (const a of answers) {
        const call = byId.get(a.id);
        if (call?.method !== "eth_getLogs" || !Array.isArray(a.result)) continue;
        const logs = a.result as { blockNumber: string; blockTimestamp?: string }[];
        if (logs.length > p.maxLogs) {
          stats.rangeRefusals++;
          const q = call.params?.[0] as { fromBlock?: string };
          const from = BigInt(q?.fromBlock ?? logs[0]!.blockNumber);
          const cut = BigInt(logs[p.maxLogs]!.blockNumber);
          const to = cut > from ? cut - 1n : from;
          delete a.result;
          a.error = {
            code: -32005,
            message: `query returned more than ${p.maxLogs} results. Try with this block range [${hex(from)}, ${hex(to)}].`,
          };
        } else if (p.stripBlockTimestamp) {
          for (const l of logs) delete l.blockTimestamp;
        }
      }
      return Response.json(Array.isArray(answer) ? answers : answers[0]);
    },
  });
  state.url = `http://127.0.0.1:${server.port}`;
  state.wsUrl = `ws://127.0.0.1:${server.port}`;
  state.dropSockets = () => {
    const n = sockets.size;
    for (const ws of [...sockets]) ws.close();
    return n;
  };
  state.reset = () => {
    state.stats = fresh();
  };
  state.stop = () => server.stop(true);
  return state;
}
