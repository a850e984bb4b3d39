/**
 * The compute-unit budget of an RPC provider, spent on the client side: hosted providers bill every call by a
 * per-method weight and answer HTTP 429 beyond a rate of compute units per second. A token bucket spends them at
 * the configured rate (burst: two seconds of it); a 429 halves the rate and pauses for its `Retry-After`, and
 * every answered second adds back a tenth of the configured rate (AIMD, as Ponder does with requests per second).
 */

/** Alchemy's published compute units per method; a method not listed costs `DEFAULT_CU`. */
export const ALCHEMY_CU: Readonly<Record<string, number>> = {
  eth_blockNumber: 10,
  eth_chainId: 10,
  net_version: 10,
  eth_subscribe: 10,
  eth_unsubscribe: 10,
  eth_feeHistory: 10,
  eth_maxPriorityFeePerGas: 10,
  eth_getTransactionReceipt: 15,
  eth_getBlockByNumber: 16,
  eth_getTransactionByHash: 17,
  eth_gasPrice: 19,
  eth_getBalance: 19,
  eth_getCode: 19,
  eth_getBlockByHash: 21,
  eth_getTransactionCount: 26,
  eth_call: 26,
  eth_getLogs: 75,
  eth_estimateGas: 87,
  eth_sendRawTransaction: 250,
};

/** Weight of a method missing from the table (Alchemy's most common price). */
export const DEFAULT_CU = 26;

/** Settings of a budget (RPC_CU_PER_SECOND, RPC_CU_WEIGHTS, RPC_MAX_BATCH). */
export type BudgetSettings = {
  /** Compute units per second to spend at most; 0: no client-side limit (a 429 still pauses). */
  cuPerSecond: number;
  /** Weights by method, over Alchemy's; `*` sets the weight of methods not listed. */
  weights: Record<string, number>;
  /** Calls in one JSON-RPC batch at most (halved on a provider's batch-size error). */
  maxBatch: number;
};

/** Defaults: Alchemy's free tier (330 CU/s), its weights, batches of 100. */
export const defaultBudgetSettings: BudgetSettings = { cuPerSecond: 330, weights: {}, maxBatch: 100 };

/** Parses RPC_CU_WEIGHTS ("eth_getLogs=60,eth_call=20,*=20"); throws on a malformed entry. */
export function parseWeights(text: string | undefined): Record<string, number> {
  const out: Record<string, number> = {};
  for (const part of (text ?? "").split(",")) {
    const entry = part.trim();
    if (!entry) continue;
    const m = /^([A-Za-z0-9_*]+)\s*=\s*(\d+(?:\.\d+)?)$/.exec(entry);
    if (!m) throw new Error(`RPC_CU_WEIGHTS: "${entry}" is not method=units`);
    out[m[1]!] = Number(m[2]);
  }
  return out;
}

/** Share of the configured rate and burst actually spent (see `burst`). */
const MARGIN = 0.97;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** One provider's budget (one per RPC URL: the provider bills the key in it, whatever the subsystem). */
export class CuBudget {
  /** Current rate (CU/s): the configured one, lowered by 429s and raised back while calls answer. */
  rate: number;
  /** Calls per JSON-RPC batch now (halved on a batch-size error). */
  maxBatch: number;
  /** Compute units of answered calls by method (a throttled call is not billed). */
  readonly spent = new Map<string, number>();
  /** Answered calls by method. */
  readonly calls = new Map<string, number>();
  /** HTTP 429 answers seen. */
  throttles = 0;
  /** Compute units answered, all methods. */
  total = 0;
  /** (time, total) samples, one per 10 s at most, over the last hour. */
  private samples: { t: number; total: number }[] = [];
  private tokens: number;
  private last = performance.now();
  private pausedUntil = 0;
  private queue: Promise<void> = Promise.resolve();

  constructor(readonly settings: BudgetSettings) {
    this.rate = settings.cuPerSecond;
    this.tokens = this.burst;
    this.maxBatch = Math.max(1, settings.maxBatch);
  }

  /**
   * Bucket size: two seconds at the configured rate, less a margin (as the refill): the provider counts from when
   * calls arrive, and a call that travels faster than the one before would otherwise find its bucket short.
   */
  get burst(): number {
    return 2 * this.settings.cuPerSecond * MARGIN;
  }

  /** Compute units of one call. */
  cost(method: string): number {
    return this.settings.weights[method] ?? ALCHEMY_CU[method] ?? this.settings.weights["*"] ?? DEFAULT_CU;
  }

  /** Largest batch of calls costing `each` that fits the bucket (and `maxBatch`). */
  batchFor(each: number): number {
    if (this.settings.cuPerSecond <= 0) return this.maxBatch;
    return Math.max(1, Math.min(this.maxBatch, Math.floor(this.burst / Math.max(each, 1))));
  }

  private refill(now: number) {
    const rise = (now - this.last) / 1000;
    this.last = now;
    if (this.settings.cuPerSecond <= 0) return;
    // Additive increase: a tenth of the configured rate per second without a 429.
    this.rate = Math.min(this.settings.cuPerSecond, this.rate + rise * this.settings.cuPerSecond * 0.1);
    this.tokens = Math.min(this.burst, this.tokens + rise * this.rate * MARGIN);
  }

  /** Waits until `cost` compute units may be spent, then spends them; callers are served in order. */
  acquire(cost: number): Promise<void> {
    const turn = this.queue.then(() => this.take(cost));
    this.queue = turn.catch(() => {});
    return turn;
  }

  private async take(cost: number) {
    for (;;) {
      const now = performance.now();
      if (now < this.pausedUntil) {
        await sleep(this.pausedUntil - now);
        continue;
      }
      this.refill(now);
      if (this.settings.cuPerSecond <= 0) return;
      // A call dearer than the whole bucket waits for a full bucket and leaves it in debt.
      const need = Math.min(cost, this.burst);
      if (this.tokens >= need) {
        this.tokens -= cost;
        return;
      }
      await sleep(Math.max(1, ((need - this.tokens) / Math.max(this.rate * MARGIN, 1e-3)) * 1000));
    }
  }

  /** A call answered (billed). */
  answered(method: string, cost = this.cost(method)) {
    this.spent.set(method, (this.spent.get(method) ?? 0) + cost);
    this.calls.set(method, (this.calls.get(method) ?? 0) + 1);
    this.total += cost;
  }

  /**
   * Compute units billed without a request of ours (the bytes a subscription pushes): counted as answered and taken
   * from the bucket at once, into debt if need be, so the calls after them wait for the rate.
   */
  billPushed(method: string, cost: number) {
    this.refill(performance.now());
    if (this.settings.cuPerSecond > 0) this.tokens -= cost;
    this.answered(method, cost);
  }

  /** Compute units an hour over the last hour (extrapolated from at least a minute); null before a minute. */
  perHour(now = performance.now()): number | null {
    const last = this.samples.at(-1);
    if (!last || now - last.t >= 10_000) this.samples.push({ t: now, total: this.total });
    while (this.samples.length > 2 && now - this.samples[1]!.t >= 3_600_000) this.samples.shift();
    const first = this.samples[0]!;
    const span = now - first.t;
    return span < 60_000 ? null : Math.round(((this.total - first.total) / span) * 3_600_000);
  }

  /** A 429: halve the rate (multiplicative decrease), empty the bucket, pause for `Retry-After` (default 1 s). */
  throttled(retryAfterS?: number) {
    this.throttles++;
    const now = performance.now();
    this.refill(now);
    if (this.settings.cuPerSecond > 0) {
      this.rate = Math.max(this.settings.cuPerSecond * 0.05, this.rate / 2);
      this.tokens = Math.min(this.tokens, 0);
    }
    const pause = retryAfterS !== undefined && Number.isFinite(retryAfterS) ? Math.min(retryAfterS, 60) * 1000 : 1000;
    this.pausedUntil = Math.max(this.pausedUntil, now + pause);
  }

  /** A provider refused a batch for its size: halve it. */
  batchRefused() {
    this.maxBatch = Math.max(1, Math.floor(this.maxBatch / 2));
  }
}

let settings: BudgetSettings = { ...defaultBudgetSettings, cuPerSecond: 0 };
const budgets = new Map<string, CuBudget>();

/**
 * Sets the settings of budgets made from now on (the service calls it with its configuration; before that, and in
 * code that never does, budgets only count and honour 429s).
 */
export function configureBudgets(next: BudgetSettings) {
  settings = next;
  budgets.clear();
}

/** The settings budgets are made with now. */
export function budgetSettings(): BudgetSettings {
  return settings;
}

/** The budget of an RPC URL (one per URL in the process). */
export function budgetFor(url: string): CuBudget {
  let b = budgets.get(url);
  if (!b) {
    b = new CuBudget(settings);
    budgets.set(url, b);
  }
  return b;
}

/** Every budget of the process, for metrics and status. */
export function allBudgets(): CuBudget[] {
  return [...budgets.values()];
}

/** Compute units answered so far, by method, over every budget of the process. */
export function computeUnitsByMethod(): Map<string, number> {
  const out = new Map<string, number>();
  for (const b of budgets.values()) for (const [m, cu] of b.spent) out.set(m, (out.get(m) ?? 0) + cu);
  return out;
}

/** Seconds of a `Retry-After` header (delta-seconds or an HTTP date); undefined when absent or unreadable. */
export function retryAfterSeconds(value: string | null | undefined): number | undefined {
  if (!value) return undefined;
  const n = Number(value);
  if (Number.isFinite(n) && n >= 0) return n;
  const at = Date.parse(value);
  return Number.isFinite(at) ? Math.max(0, (at - Date.now()) / 1000) : undefined;
}
