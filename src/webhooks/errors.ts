/** Errors of the webhooks subsystem. */
import { AppError } from "../common/errors";

/** A destination the rules forbid (not https, or a private, loopback, link-local or metadata address). */
export class UnsafeDestinationError extends AppError {
  constructor(message: string) {
    super(message, { retryable: false });
  }
}

/** An endpoint's stored secret that cannot be opened (wrong or missing WEBHOOK_SECRET_KEY); names no secret. */
export class SecretKeyError extends AppError {
  constructor(
    readonly endpointId: string,
    reason: string,
    cause?: unknown,
  ) {
    super(`the signing secret of webhook endpoint ${endpointId} cannot be opened: ${reason}`, {
      cause,
      retryable: false,
      fields: { endpoint_id: endpointId },
    });
  }
}

/** A create past the cap of endpoints per merchant (MAX_ENDPOINTS_PER_MERCHANT). */
export class EndpointLimitError extends AppError {
  constructor(max: number) {
    super(`a merchant has at most ${max} webhook endpoints: delete one before creating another`, { retryable: false });
  }
}

/** A field of an endpoint's input (the API's body, the CLI's flags) that the rules refuse; `param` names it. */
export class InvalidFieldError extends AppError {
  constructor(
    readonly param: string,
    message: string,
  ) {
    super(message, { retryable: false });
  }
}
