import type {
  Account,
  Address,
  Chain,
  Hash,
  Hex,
  PublicClient,
  TransactionReceipt,
  Transport,
  WalletClient,
} from "viem";
import type { Logger } from "../common/log";
import type { Sql } from "../db/client";

/** A viem wallet client with the keeper's account attached (a local private-key account). */
export type KeeperWallet = WalletClient<Transport, Chain | undefined, Account>;

/** The part of the service config every keeper reads. */
export type KeeperBaseConfig = {
  chainId: number;
  POLL_INTERVAL_MS: number;
  /** Seconds to wait after the 1st, 2nd, … consecutive failed charge; the last entry repeats. */
  retrySchedule: number[];
  /** A transaction not mined after this long is replaced at the same nonce with higher fees (default 30 s). */
  txDeadlineMs?: number;
  /** Most the keeper pays per gas, in wei (KEEPER_MAX_FEE_GWEI; default: no cap). */
  maxFeePerGas?: bigint;
};

/** The part of the service config the module keeper reads. */
export type KeeperConfig = KeeperBaseConfig & {
  PROCESSOR_ADDRESS: string;
  /** Failed attempts after which a never-paid subscription is only re-simulated (KEEPER_MAX_ATTEMPTS; default: no limit). */
  maxAttempts?: number;
  /** Seconds between re-simulations of such a subscription (KEEPER_RECHECK_INTERVAL_S, default 86400). */
  recheckIntervalS?: number;
};

/** Options for `createKeeper` (and, with its own config, the Spend Permission keeper); knobs have production defaults. */
export type KeeperOptions<C extends KeeperBaseConfig = KeeperConfig> = {
  sql: Sql;
  client: PublicClient;
  wallet: KeeperWallet;
  config: C;
  log?: Logger;
  /** The database kind when known; PGlite (one session) gets an in-process lock instead of an advisory lock. */
  dbKind?: "postgres" | "pglite";
  /** Most transactions sent and not yet mined at once (default 64). */
  maxInFlight?: number;
  /** Subscriptions simulated in parallel; sends stay serialized by nonce (default 4). */
  concurrency?: number;
  /** How long a database claim keeps other keepers off a subscription (default 120 s). */
  claimTtlMs?: number;
  /** A sent transaction without a receipt after this long is given up and the nonce resynced (default 180 s). */
  txTimeoutMs?: number;
  /** A mined charge the indexer has not reached after this long is forgotten (default 600 s). */
  awaitIndexTimeoutMs?: number;
  /** Most due subscriptions read per tick (default 500). */
  batchLimit?: number;
  /** Told of each charge sent and of each mined outcome (metrics). */
  observer?: KeeperObserver;
  /** Milliseconds "now" for the deadlines of sent charges (default `Date.now`; tests inject a clock). */
  clock?: () => number;
};

/** What the keeper reports: a charge sent, then its mined outcome (`failed` with the on-chain reason). */
export type KeeperObserver = {
  charge: (outcome: "sent" | "succeeded" | "failed" | "reverted", reason?: string | null) => void;
};

/** A charge the keeper sent this tick. */
export type SentCharge = { module: string; subscriptionId: string; hash: Hash };

/** A charge re-sent at the same nonce with higher fees because it was not mined in time. */
export type ReplacedCharge = { subscriptionId: string; nonce: number; replaced: Hash; hash: Hash };

/** A due subscription the keeper did not send, and why (`NotDue`, `NotChargeable`, `claimed`, …). */
export type SkippedCharge = { module: string; subscriptionId: string; reason: string };

/** What one keeper pass did. */
export type TickResult = {
  /** Unix seconds used as "now": the later of the wall clock and the latest block. */
  now: string;
  /** True when another process holds this key's lock: the pass sent nothing. */
  standby: boolean;
  /** Due subscriptions found in the index (after the retry schedule). */
  due: number;
  sent: SentCharge[];
  replaced: ReplacedCharge[];
  skipped: SkippedCharge[];
  /** Receipts received this pass, with their status. */
  mined: { subscriptionId: string; hash: Hash; status: "success" | "reverted" }[];
  /** RPC or database errors on single subscriptions (the pass went on). */
  errors: number;
};

/** The running keeper. */
export type Keeper = {
  /** Starts polling every POLL_INTERVAL_MS. */
  start: () => Promise<void>;
  /** Stops polling, finishes the current pass, collects outstanding receipts (bounded) and gives up the lock. */
  stop: () => Promise<void>;
  /** Runs one pass now (serialized with the polling loop). */
  tick: () => Promise<TickResult>;
  /** Charges sent and not yet seen by the indexer. */
  inFlight: () => number;
  /** Passes of the polling loop finished so far (tests wait for N more instead of sleeping). */
  passes: () => number;
  /** The keeper's address. */
  address: Address;
};

/** Fee fields of one transaction: EIP-1559 or legacy. */
export type Fees = { maxFeePerGas: bigint; maxPriorityFeePerGas: bigint } | { gasPrice: bigint };

/**
 * The contract a keeper's transactions call and how to read them back: the processor's `charge(module, id)` for
 * module subscriptions, the Spend Permission manager's `spend(permission, value)` for permissions.
 */
export type ChargeTarget = {
  /** Where every transaction of the keeper goes. */
  address: Address;
  /** The module (or manager) and subscription id a transaction's calldata charges; null for any other call. */
  decode: (input: Hex) => { module: string; subscriptionId: string } | null;
  /** How a mined, successful transaction ended, for the observer (null: nothing to report). */
  outcome: (receipt: TransactionReceipt) => { outcome: "succeeded" | "failed"; reason?: string | null } | null;
};

/** Everything the keeper's parts share. */
export type KeeperContext = {
  sql: Sql;
  client: PublicClient;
  wallet: KeeperWallet;
  chain: Chain;
  chainId: number;
  target: ChargeTarget;
  address: Address;
  /** Claim owner: `<address>:<instance>`. */
  owner: string;
  log: Logger;
  claimTtlMs: number;
  maxFeePerGas?: bigint;
  observer?: KeeperObserver;
  /** Milliseconds now, for the deadlines of sent charges. */
  now: () => number;
};

/** An empty pass result. */
export function emptyResult(now = "0", standby = false): TickResult {
  return { now, standby, due: 0, sent: [], replaced: [], skipped: [], mined: [], errors: 0 };
}
