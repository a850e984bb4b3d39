/**
 * The webhook dispatcher (role `webhooks`): claims due deliveries with a lease (several processes share the work),
 * sends them signed, and records outcomes in batches. At least once: a delivery whose process dies is claimed again
 * when its lease runs out. Woken by committed batches and by finished sends, else polls.
 */
import { createPollLoop } from "../common/async";
import type { Logger } from "../common/log";
import type { Config } from "../common/config";
import { describeError } from "../common/errors";
import type { Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import { toEnvelope } from "../events/envelope";
import { openSecret } from "./secrets";
import { claimDue, recordOutcomes, type Claimed, type Outcome } from "./queries";
import { sendAttempt } from "./send";

/** Settings of the dispatcher (the WEBHOOK_* variables). */
export type DispatcherConfig = {
  timeoutMs: number;
  retrySchedule: number[];
  disableAfterS: number;
  perEndpoint: number;
  concurrency: number;
  pollIntervalMs: number;
  allowPrivate: boolean;
  secretKey?: string;
};

/** The dispatcher's settings from the WEBHOOK_* variables. */
export function dispatcherConfig(config: Config): DispatcherConfig {
  return {
    timeoutMs: config.WEBHOOK_TIMEOUT_MS,
    retrySchedule: config.WEBHOOK_RETRY_SCHEDULE.split(",").map(Number),
    disableAfterS: config.WEBHOOK_DISABLE_AFTER_S,
    perEndpoint: config.WEBHOOK_CONCURRENCY_PER_ENDPOINT,
    concurrency: config.WEBHOOK_CONCURRENCY,
    pollIntervalMs: config.WEBHOOK_POLL_INTERVAL_MS,
    allowPrivate: config.WEBHOOK_ALLOW_PRIVATE_URLS === "1",
    secretKey: config.WEBHOOK_SECRET_KEY,
  };
}

/** Options of {@link createDispatcher}. */
export type DispatcherOptions = {
  sql: Sql;
  log: Logger;
  notifier?: Notifier;
  config: DispatcherConfig;
  /** Told of each attempt's outcome (metrics). */
  onAttempt?: (ok: boolean) => void;
};

/** A running dispatcher. */
export type Dispatcher = { start: () => Promise<void>; stop: () => Promise<void>; wake: () => void };

/** Seconds until the attempt after failed attempt `attempt` (1-based), ±10 %; null after the last one. */
export function retryDelay(schedule: number[], attempt: number, random = Math.random): number | null {
  const base = schedule[attempt - 1];
  return base === undefined ? null : base * (0.9 + 0.2 * random());
}

/** The secrets that sign a delivery now: the current one, and the previous one during its 24 h overlap. */
export function activeSecrets(
  c: Pick<Claimed, "secret" | "previous_secret" | "previous_secret_expires_at">,
  key?: string,
) {
  const out = [openSecret(c.secret, key)];
  if (c.previous_secret && c.previous_secret_expires_at && c.previous_secret_expires_at.getTime() > Date.now()) {
    out.push(openSecret(c.previous_secret, key));
  }
  return out;
}

/**
 * How long a claimed delivery stays leased: the send's timeout plus a margin for recording the outcome. A process
 * that dies mid-send leaves its leases behind, so an endpoint's in-flight deliveries resume after this long.
 */
export const leaseMs = (config: Pick<DispatcherConfig, "timeoutMs">) => config.timeoutMs + 5_000;

/** Creates the dispatcher. */
export function createDispatcher(opts: DispatcherOptions): Dispatcher {
  const { sql, log, config } = opts;
  let inflight = 0;
  let outcomes: Outcome[] = [];
  let wakeTimer: ReturnType<typeof setTimeout> | null = null;
  let unsubscribe: (() => Promise<void>) | null = null;
  const drained: (() => void)[] = [];

  const flush = async () => {
    if (outcomes.length === 0) return;
    const batch = outcomes;
    outcomes = [];
    try {
      await recordOutcomes(sql, batch, config.disableAfterS);
    } catch (err) {
      outcomes = batch.concat(outcomes); // kept for the next pass; the leases keep the rows from a second send
      throw err;
    }
  };

  const deliver = async (c: Claimed) => {
    let outcome: Outcome;
    try {
      const result = await sendAttempt(c.url, c.id, JSON.stringify(toEnvelope(c)), activeSecrets(c, config.secretKey), {
        timeoutMs: config.timeoutMs,
        allowPrivate: config.allowPrivate,
      });
      const retryInS = result.ok || c.origin === "test" ? null : retryDelay(config.retrySchedule, c.attempts);
      outcome = { deliveryId: c.delivery_id, attempt: c.attempts, ...result, retryInS };
    } catch (err) {
      const retryInS = retryDelay(config.retrySchedule, c.attempts);
      const error = describeError(err, 300);
      outcome = {
        deliveryId: c.delivery_id,
        attempt: c.attempts,
        ok: false,
        status: null,
        error,
        durationMs: 0,
        retryInS,
      };
    }
    outcomes.push(outcome);
    opts.onAttempt?.(outcome.ok);
  };

  const soon = () => {
    wakeTimer ??= setTimeout(() => {
      wakeTimer = null;
      loop.wake();
    }, 2);
  };

  const step = async (): Promise<boolean> => {
    await flush();
    const room = config.concurrency - inflight;
    if (room <= 0) return false;
    const claimed = await claimDue(sql, { limit: room, perEndpoint: config.perEndpoint, leaseMs: leaseMs(config) });
    for (const c of claimed) {
      inflight++;
      void deliver(c).finally(() => {
        inflight--;
        soon();
        if (inflight === 0) drained.splice(0).forEach((f) => f());
      });
    }
    return false;
  };

  const loop = createPollLoop({
    intervalMs: config.pollIntervalMs,
    step,
    onError: (err, failures, delayMs) => void log("warn", "webhook dispatch pass failed", { err, failures, delayMs }),
  });

  return {
    async start() {
      if (opts.notifier) unsubscribe = await opts.notifier.subscribe(() => loop.wake());
      loop.start();
    },
    async stop() {
      await unsubscribe?.();
      await loop.stop();
      if (wakeTimer) clearTimeout(wakeTimer);
      if (inflight > 0) await new Promise<void>((resolve) => drained.push(resolve));
      await flush().catch((err) => log("error", "webhook outcomes not recorded at stop", { err }));
    },
    wake: () => loop.wake(),
  };
}
