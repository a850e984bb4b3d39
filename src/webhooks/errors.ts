/** Errors of the webhooks subsystem. */
import { AppError } from "../common/errors";

/** A destination the rules forbid (not https, or a private, loopback, link-local or metadata address). */
export class UnsafeDestinationError extends AppError {
  constructor(message: string) {
    super(message, { retryable: false });
  }
}

/** A stored secret that cannot be opened (wrong or missing WEBHOOK_SECRET_KEY). */
export class SecretKeyError extends AppError {
  constructor(message: string, cause?: unknown) {
    super(message, { cause, retryable: false });
  }
}
