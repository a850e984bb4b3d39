/** Errors of the event log. */
import { AppError } from "../common/errors";

/** A batch took its block of seqs before an earlier batch took its own: it is retried, so the log stays in order. */
export class SeqOrderError extends AppError {
  constructor(message: string) {
    super(message, { retryable: true });
  }
}
