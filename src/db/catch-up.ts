/** "The chain is catching up", read from its `chains` row: shared by the webhook fan-out and the renewal loop. */
import type { Q } from "./query";

/** How long a catch-up whose cursor stopped moving (its indexer died or stalled) still counts as one. */
export const CATCH_UP_HOLD_S = 60;

/**
 * Whether the chain (its `chains` row as `c`) is catching up: its last batch stopped short of the head it was
 * indexing towards, and the cursor moved within CATCH_UP_HOLD_S.
 */
export const catchingUpSql = (q: Q) =>
  q`coalesce(c.catching_up and c.updated_at > clock_timestamp() - ${CATCH_UP_HOLD_S} * interval '1 second', false)`;
