/**
 * The webhook dispatcher (role `webhooks`): creates the deliveries of newly written events from the fan-out outbox,
 * claims due deliveries with a lease (several processes share the work), sends them signed, and records outcomes in
 * batches. At least once: a delivery whose process dies is claimed again when its lease runs out. Woken by committed
 * batches and by finished sends, else polls.
 */
import { createPollLoop } from "../common/async";
import type { Logger } from "../common/log";
import type { Config } from "../common/config";
import { describeError } from "../common/errors";
import type { Sql } from "../db/client";
import type { Notifier } from "../db/notify";
import { toEnvelope } from "../events/envelope";
import { SecretKeyError } from "./errors";
import { openSecret } from "./secrets";
import { drainFanOut } from "./fanout";
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
  /** The source of the retry delays' jitter, in [0, 1); `Math.random` by default. */
  random?: () => number;
};

/** A running dispatcher. */
export type Dispatcher = {
  start: () => Promise<void>;
  stop: () => Promise<void>;
  wake: () => void;
  /** Poll passes finished so far (tests wait for passes instead of sleeping). */
  passes: () => number;
};

/** Seconds until the attempt after failed attempt `attempt` (1-based), ±10 %; null after the last one. */
export function retryDelay(schedule: number[], attempt: number, random = Math.random): number | null {
  const base = schedule[attempt - 1];
  return base === undefined ? null : base * (0.9 + 0.2 * random());
}

/** The secrets that sign a delivery now: the current one, and the previous one during its 24 h overlap. */
export function activeSecrets(
  c: Pick<Claimed, "endpoint_id" | "secret" | "previous_secret" | "previous_secret_expires_at">,
  key?: string,
) {
  const out = [openSecret(c.secret, key, c.endpoint_id)];
  if (c.previous_secret && c.previous_secret_expires_at && c.previous_secret_expires_at.getTime() > Date.now()) {
    out.push(openSecret(c.previous_secret, key, c.endpoint_id));
  }
  return out;
}

/**
 * How long a claimed delivery stays leased: the send's timeout plus a margin for recording the outcome. A process
 * that dies mid-send leaves its leases behind, so an endpoint's in-flight deliveries resume after this long.
 */
export const leaseMs = (config: Pick<DispatcherConfig, "timeoutMs">) => config.timeoutMs + 5_000;

/**
 * Sends one claimed delivery; its outcome, with the delay before a retry (a thrown error is a failed attempt). A
 * secret that does not open (another or no WEBHOOK_SECRET_KEY) sends nothing and is logged as an error.
 */
async function attempt(c: Claimed, config: DispatcherConfig, random: () => number, log: Logger): Promise<Outcome> {
  try {
    const result = await sendAttempt(c.url, c.id, JSON.stringify(toEnvelope(c)), activeSecrets(c, config.secretKey), {
      timeoutMs: config.timeoutMs,
      allowPrivate: config.allowPrivate,
    });
    const retryInS = result.ok || c.origin === "test" ? null : retryDelay(config.retrySchedule, c.attempts, random);
    return { deliveryId: c.delivery_id, attempt: c.attempts, ...result, retryInS };
  } catch (err) {
    if (err instanceof SecretKeyError) {
      log("error", "webhook not sent: the endpoint's signing secret cannot be opened with WEBHOOK_SECRET_KEY", {
        endpoint_id: c.endpoint_id,
        delivery_id: c.delivery_id,
        err,
      });
    }
    const retryInS = retryDelay(config.retrySchedule, c.attempts, random);
    const error = describeError(err, 300);
    return {
      deliveryId: c.delivery_id,
      attempt: c.attempts,
      ok: false,
      outcome: "not_sent",
      status: null,
      error,
      durationMs: 0,
      retryInS,
    };
  }
}

/**
 * Outcomes known here and not yet recorded (their deliveries are still leased, but no longer in flight), recorded in
 * batches, one batch at a time; a failed batch is kept for the next flush.
 */
function createOutcomeBuffer(sql: Sql, disableAfterS: number) {
  let outcomes: Outcome[] = [];
  let recording: Outcome[] = [];
  let flushing: Promise<void> | null = null;

  const record = async () => {
    while (outcomes.length > 0) {
      recording = outcomes;
      outcomes = [];
      try {
        await recordOutcomes(sql, recording, disableAfterS);
      } catch (err) {
        outcomes = recording.concat(outcomes); // the leases keep these rows from a second send meanwhile
        throw err;
      } finally {
        recording = [];
      }
    }
  };
  return {
    push: (o: Outcome) => void outcomes.push(o),
    /** The recording in progress, or a new one: one at a time. */
    flush: (): Promise<void> => {
      if (!flushing) flushing = record().finally(() => (flushing = null));
      return flushing;
    },
    /** Deliveries whose outcome is known here: sent, so not in flight for the claim. */
    settled: () => [...recording, ...outcomes].map((o) => o.deliveryId),
  };
}

/** The sends in flight: how many, and a wait until there are none; `onSettled` runs after each one ends. */
function createInflight(onSettled: () => void) {
  let count = 0;
  const drained: (() => void)[] = [];
  return {
    count: () => count,
    track(send: Promise<void>) {
      count++;
      void send.finally(() => {
        count--;
        onSettled();
        if (count === 0) drained.splice(0).forEach((f) => f());
      });
    },
    idle: () => (count === 0 ? Promise.resolve() : new Promise<void>((resolve) => drained.push(resolve))),
  };
}

/** Creates the dispatcher. */
export function createDispatcher(opts: DispatcherOptions): Dispatcher {
  const { sql, log, config } = opts;
  const buffer = createOutcomeBuffer(sql, config.disableAfterS);
  let wakeQueued = false;
  let unsubscribe: (() => Promise<void>) | null = null;

  const deliver = async (c: Claimed) => {
    const outcome = await attempt(c, config, opts.random ?? Math.random, log);
    buffer.push(outcome);
    opts.onAttempt?.(outcome.ok);
  };

  /** Wakes the loop once for every send that ends in this turn of the event loop. */
  const soon = () => {
    if (wakeQueued) return;
    wakeQueued = true;
    setImmediate(() => {
      wakeQueued = false;
      loop.wake();
    });
  };

  const inflight = createInflight(soon);
  let drainDue = true;
  let drainedAt = 0;
  const wakeToDrain = () => {
    drainDue = true;
    loop.wake();
  };

  // Recording outcomes and claiming run side by side: the claim does not count the deliveries whose outcome is
  // known here as in flight, so an endpoint's next sends need not wait for the previous ones to be recorded. The
  // outbox is drained first (its deliveries are claimed in the same pass); a failed drain still lets the claim run.
  const step = async (): Promise<boolean> => {
    const recorded = buffer.flush();
    let more = false;
    let drainFailed: { err: unknown } | null = null;
    // The outbox gets new ranges only by commits: drained when one is announced (or the dispatcher is woken), once a
    // poll interval, and again at once while a drain leaves more; not on every finished send.
    if (drainDue || Date.now() - drainedAt >= config.pollIntervalMs) {
      drainDue = false;
      drainedAt = Date.now();
      try {
        more = drainDue = await drainFanOut(sql);
      } catch (err) {
        drainDue = true;
        drainFailed = { err };
      }
    }
    try {
      const room = config.concurrency - inflight.count();
      if (room > 0) {
        const claimed = await claimDue(sql, {
          limit: room,
          perEndpoint: config.perEndpoint,
          leaseMs: leaseMs(config),
          settled: buffer.settled(),
        });
        for (const c of claimed) inflight.track(deliver(c));
      }
    } finally {
      await recorded;
    }
    if (drainFailed) throw drainFailed.err;
    return more;
  };

  const loop = createPollLoop({
    intervalMs: config.pollIntervalMs,
    step,
    onError: (err, failures, delayMs) => void log("warn", "webhook dispatch pass failed", { err, failures, delayMs }),
  });

  return {
    async start() {
      if (opts.notifier) unsubscribe = await opts.notifier.subscribe(wakeToDrain);
      loop.start();
    },
    async stop() {
      await unsubscribe?.();
      await loop.stop();
      await inflight.idle();
      await buffer.flush().catch((err) => log("error", "webhook outcomes not recorded at stop", { err }));
    },
    wake: wakeToDrain,
    passes: () => loop.passes(),
  };
}
