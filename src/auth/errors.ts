/** Errors of credential checks; src/http maps them to 401/403 envelopes (src/http/plugins/error-handler.ts). */
import { AppError } from "../common/errors";

/** Base class of every authentication or authorization failure. */
export class AuthError extends AppError {}

/** No credential, a malformed one, or an unknown, revoked or expired one (HTTP 401). */
export class InvalidCredentialError extends AuthError {}

/** A valid credential that may not read what it asked for (HTTP 403). */
export class ForbiddenCredentialError extends AuthError {}

/** The admin key asking to change something: it reads every merchant and writes nothing (HTTP 403). */
export class ReadOnlyCredentialError extends ForbiddenCredentialError {}
