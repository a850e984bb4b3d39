/** Errors of the indexer; `retryable` says whether the next poll may succeed where this one failed. */
import { AppError, type AppErrorOptions } from "../common/errors";

export { RangeRefusedError, RpcUnavailableError } from "../chain/errors";

/** The chain no longer matches what was indexed (or what was just fetched): a reorg is under way. */
export class ReorgDetectedError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** The node does not have a block (yet): a lagging backend. Wait and ask again; never a reorg by itself. */
export class ChainBehindError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** A block's logs may be incomplete (its bloom names our contracts but no log came back): fetch it again. */
export class LogsInDoubtError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** The database cursor is not where this batch was built from: another writer or a stale view. */
export class CursorMovedError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** The database already indexes another processor for this chain. */
export class ProcessorMismatchError extends AppError {}

/** `waitForBlock` gave up before the block was indexed. */
export class WaitTimeoutError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** The advisory-lock session holding leadership was lost. */
export class LeadershipLostError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}

/** A token's `symbol()`/`decimals()` did not answer in time or the transport failed: read again later. */
export class TokenMetaUnavailableError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}
