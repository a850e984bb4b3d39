/**
 * New heads pushed over WebSocket (`eth_subscribe("newHeads")` on `RPC_WS_URL`), for the indexer's head poll: a head
 * arrives as soon as the node has it instead of at the next poll. The socket reconnects with backoff (0.5 s doubling
 * to 30 s, jittered) and subscribes again; while it is down the poll reads the head over HTTP. The feed only tells of
 * heads: the index follows its cursor, so blocks whose heads were missed are fetched by range with the next head.
 * Every byte received is billed to the provider's budget at `WS_CU_PER_BYTE` (what providers charge subscriptions).
 */
import type { Logger } from "../common/log";
import type { CuBudget } from "./budget";
import { toHeader, type Header, type RawBlock } from "./rpc";

/** Compute units per byte a provider bills for subscription traffic (Alchemy: 0.04). */
export const WS_CU_PER_BYTE = 0.04;

/** Options of {@link createHeadFeed}. */
export type HeadFeedOptions = {
  /** The budget the pushed bytes and `eth_subscribe` calls are billed to (the HTTP RPC URL's: one provider key). */
  budget?: CuBudget;
  log?: Logger;
  /** First pause before a reconnect (default 500 ms); doubles per failure up to `maxBackoffMs` (default 30 s). */
  minBackoffMs?: number;
  maxBackoffMs?: number;
};

/** A subscription to new heads; restartable. */
export type HeadFeed = {
  /** Connects (idempotent); the socket then stays up, reconnecting, until `stop`. */
  start(): void;
  /** Closes the socket and stops reconnecting. */
  stop(): void;
  /** Whether the subscription is live now (connected and subscribed). */
  live(): boolean;
  /** Heads received so far (a counter: "anything new since I looked?"). */
  pushes(): number;
  /** The newest head received, and when (`performance.now()`); null before the first. */
  latest(): { header: Header; at: number } | null;
  /** Resolves at the next head, at the next connect or disconnect, or after `ms`, whichever comes first. */
  wait(ms: number): Promise<void>;
};

/** Creates a head feed on `url` (ws:// or wss://); nothing connects before `start`. */
export function createHeadFeed(url: string, opts: HeadFeedOptions = {}): HeadFeed {
  const log = opts.log ?? (() => {});
  const minBackoff = opts.minBackoffMs ?? 500;
  const maxBackoff = opts.maxBackoffMs ?? 30_000;
  const where = redact(url);
  let socket: WebSocket | null = null;
  let subscription: string | null = null;
  let running = false;
  let failures = 0;
  let retry: ReturnType<typeof setTimeout> | null = null;
  let count = 0;
  let newest: { header: Header; at: number } | null = null;
  const waiters = new Set<() => void>();
  const notify = () => [...waiters].forEach((w) => w());

  const bill = (method: string, cost: number) => opts.budget?.billPushed(method, cost);

  const reconnectLater = () => {
    if (!running || retry) return;
    const delay = Math.min(maxBackoff, minBackoff * 2 ** Math.min(failures, 16)) * (0.5 + Math.random() / 2);
    failures++;
    retry = setTimeout(() => {
      retry = null;
      connect();
    }, delay);
  };

  const connect = () => {
    if (!running) return;
    let ws: WebSocket;
    try {
      ws = new WebSocket(url);
    } catch (err) {
      log("warn", "head subscription failed to connect", { url: where, error: String(err).replaceAll(url, where) });
      reconnectLater();
      return;
    }
    socket = ws;
    ws.onopen = () => {
      const call = { jsonrpc: "2.0", id: 1, method: "eth_subscribe", params: ["newHeads"] };
      bill("eth_subscribe", opts.budget?.cost("eth_subscribe") ?? 0);
      ws.send(JSON.stringify(call));
    };
    ws.onmessage = (ev: MessageEvent) => {
      if (socket !== ws) return;
      const text = typeof ev.data === "string" ? ev.data : new TextDecoder().decode(ev.data as ArrayBuffer);
      bill("eth_subscription", Buffer.byteLength(text) * WS_CU_PER_BYTE);
      let msg: { id?: unknown; result?: unknown; error?: { message?: string }; method?: string; params?: unknown };
      try {
        msg = JSON.parse(text);
      } catch {
        return;
      }
      if (msg.id === 1) {
        if (typeof msg.result !== "string") {
          log("warn", "head subscription refused", { url: where, error: msg.error?.message ?? "no subscription id" });
          ws.close();
          return;
        }
        subscription = msg.result;
        failures = 0;
        log("info", "head subscription live", { url: where });
        notify();
        return;
      }
      const p = msg.params as { subscription?: string; result?: RawBlock } | undefined;
      if (msg.method !== "eth_subscription" || !p || p.subscription !== subscription || !p.result) return;
      const header = toHeader(p.result);
      if (!header) return;
      newest = { header, at: performance.now() };
      count++;
      notify();
    };
    ws.onclose = () => {
      if (socket !== ws) return;
      const wasLive = subscription !== null;
      socket = null;
      subscription = null;
      if (running) log(wasLive ? "warn" : "debug", "head subscription closed; reconnecting", { url: where, failures });
      notify();
      reconnectLater();
    };
    ws.onerror = () => {}; // a close follows
  };

  return {
    start() {
      if (running) return;
      running = true;
      failures = 0;
      connect();
    },
    stop() {
      running = false;
      if (retry) clearTimeout(retry);
      retry = null;
      const ws = socket;
      socket = null;
      subscription = null;
      ws?.close();
      notify();
    },
    live: () => subscription !== null,
    pushes: () => count,
    latest: () => newest,
    wait: (ms) =>
      new Promise<void>((resolve) => {
        const done = () => {
          clearTimeout(timer);
          waiters.delete(done);
          resolve();
        };
        const timer = setTimeout(done, Math.max(0, ms));
        waiters.add(done);
      }),
  };
}

/** A URL as logged: the path and query (where providers put the key) left out. */
function redact(url: string): string {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}`;
  } catch {
    return "(unparsable URL)";
  }
}
