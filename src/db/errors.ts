/** Errors of the database layer; `retryable` says whether running the work again may succeed. */
import { AppError, type AppErrorOptions } from "../common/errors";

/** A bulk COPY of a batch's rows failed (the batch's transaction is rolled back and retried). */
export class BulkWriteError extends AppError {
  constructor(message: string, opts: AppErrorOptions = {}) {
    super(message, { retryable: true, ...opts });
  }
}
