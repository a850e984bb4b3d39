/** A real HTTP receiver for webhook tests: records every request, answers as told; endpoints pointing at it. */
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Sql } from "../src/db/client";
import { createEndpoint } from "../src/webhooks/endpoints";

/** One received request. */
export type Received = {
  id: string;
  timestamp: string;
  signature: string;
  body: string;
  headers: Record<string, string>;
};

/** How the receiver answers one request. */
export type Answer = { status: number; delayMs?: number; headers?: Record<string, string> };

/** A running receiver. */
export type Receiver = {
  url: string;
  received: Received[];
  /** Distinct `webhook-id`s of requests answered 2xx. */
  delivered: () => Set<string>;
  /** Requests in flight now, and the most ever seen at once. */
  inflight: () => number;
  maxInflight: () => number;
  /** Sets how the receiver answers the next requests: a status, a delay, headers, from the request and its number. */
  respond: (fn: (r: Received, n: number) => Answer) => void;
  stop: () => Promise<void>;
};

/** Starts a receiver on 127.0.0.1 (a random port); answers 200 until told otherwise. */
export function startReceiver(): Receiver {
  const received: Received[] = [];
  const ok = new Set<string>();
  let answer: (r: Received, n: number) => Answer = () => ({ status: 200 });
  let now = 0;
  let max = 0;
  const server = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      now++;
      max = Math.max(max, now);
      try {
        const body = await req.text();
        const headers = Object.fromEntries(req.headers.entries());
        const r = {
          id: headers["webhook-id"] ?? "",
          timestamp: headers["webhook-timestamp"] ?? "",
          signature: headers["webhook-signature"] ?? "",
          body,
          headers,
        };
        received.push(r);
        const a = answer(r, received.length);
        if (a.delayMs) await Bun.sleep(a.delayMs);
        if (a.status >= 200 && a.status < 300) ok.add(r.id);
        return new Response("ok", { status: a.status, headers: a.headers });
      } finally {
        now--;
      }
    },
  });
  return {
    url: `http://127.0.0.1:${server.port}/hooks`,
    received,
    delivered: () => new Set(ok),
    inflight: () => now,
    maxInflight: () => max,
    respond: (fn) => void (answer = fn),
    stop: async () => void server.stop(true),
  };
}

/** Deliveries still to send plus ranges whose deliveries the fan-out outbox has not created yet (0: all sent). */
export async function undelivered(sql: Sql): Promise<number> {
  const [row] = await sql<{ n: number }[]>`
    select (select count(*) from webhook_deliveries where status = 'pending')::int
      + (select count(*) from webhook_fanout_queue)::int as n`;
  return row!.n;
}

/** An endpoint of `merchant` at `url` subscribed to every event type; returns it with its secret. */
export function endpointForAll(sql: Sql, merchant: string, url: string) {
  return createEndpoint(sql, { merchant, url, eventTypes: ["*"], description: null }, undefined);
}

/** A self-signed certificate and key (PEM) for the DNS name `name`, made by the real `openssl`. */
export function selfSignedCert(name: string): { cert: string; key: string } {
  const dir = mkdtempSync(join(tmpdir(), "cert-"));
  try {
    const run = Bun.spawnSync(
      ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-days", "2"]
        .concat(["-keyout", join(dir, "key.pem"), "-out", join(dir, "cert.pem"), "-subj", `/CN=${name}`])
        .concat(["-addext", `subjectAltName=DNS:${name}`]),
      { stderr: "pipe" },
    );
    if (run.exitCode !== 0) throw new Error(`openssl failed: ${run.stderr.toString()}`);
    return { cert: readFileSync(join(dir, "cert.pem"), "utf8"), key: readFileSync(join(dir, "key.pem"), "utf8") };
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}
