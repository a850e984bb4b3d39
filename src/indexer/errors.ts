/** The provider refused an `eth_getLogs` range (block span or result size); the range must shrink. */
export class RangeRefusedError extends Error {
  override name = "RangeRefusedError";
  constructor(
    message: string,
    /** "blocks" when the span itself is limited (a lasting cap), "results" when the answer was too big. */
    readonly kind: "blocks" | "results",
    /** A span the provider said would work, when its message names one. */
    readonly suggestedSize?: bigint,
  ) {
    super(message);
  }
}

/** An RPC call still failed after its retries (unreachable node, 429s, timeouts, server errors). */
export class RpcUnavailableError extends Error {
  override name = "RpcUnavailableError";
}

/** The chain no longer matches what was indexed (or what was just fetched): a reorg is under way. */
export class ReorgDetectedError extends Error {
  override name = "ReorgDetectedError";
}

/** The database cursor is not where this batch was built from: another writer or a stale view. */
export class CursorMovedError extends Error {
  override name = "CursorMovedError";
}

/** The database already indexes another processor for this chain. */
export class ProcessorMismatchError extends Error {
  override name = "ProcessorMismatchError";
}

/** `waitForBlock` gave up before the block was indexed. */
export class WaitTimeoutError extends Error {
  override name = "WaitTimeoutError";
}

/** The advisory-lock session holding leadership was lost. */
export class LeadershipLostError extends Error {
  override name = "LeadershipLostError";
}

/** A bulk COPY of a batch's rows failed (the batch's transaction is rolled back). */
export class BulkWriteError extends Error {
  override name = "BulkWriteError";
}

/** A JSON-RPC node answered with an HTTP error status. */
export class RpcHttpError extends Error {
  override name = "RpcHttpError";
  constructor(
    readonly status: number,
    body: string,
  ) {
    super(`HTTP ${status}: ${body}`);
  }
}

/** A JSON-RPC node answered with a JSON-RPC error object. */
export class RpcResponseError extends Error {
  override name = "RpcResponseError";
  constructor(
    readonly code: number,
    message: string,
    readonly status?: number,
  ) {
    super(message);
  }
}
