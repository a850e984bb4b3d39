/** `FailureReason` of docs/protocol.md, by its on-chain number (0 = None is never emitted). */
export const FAILURE_REASONS = [
  "InsufficientAllowance",
  "InsufficientBalance",
  "TransferFailed",
  "AllowanceExpired",
] as const;

/** A failure code as activity records carry it. */
export type FailureReason = (typeof FAILURE_REASONS)[number];

/** The name of on-chain reason `n`, or null for None / an unknown number. */
export function failureReasonName(n: number): FailureReason | null {
  return FAILURE_REASONS[n - 1] ?? null;
}
