import { BaseError, ContractFunctionRevertedError } from "viem";
import { AppError } from "../common/errors";

/** Thrown when the wallet's chain disagrees with the configured chain. */
export class KeeperConfigError extends AppError {}

/** Reverts that mean "nothing to do right now": another keeper took it, or the state changed under us. */
export const QUIET_REVERTS = new Set(["NotDue", "NotChargeable"]);

/** The custom error name of a reverted call, or undefined when the error is not a revert (RPC trouble). */
export function revertName(err: unknown): string | undefined {
  if (!(err instanceof BaseError)) return undefined;
  const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError);
  if (reverted instanceof ContractFunctionRevertedError)
    return reverted.data?.errorName ?? reverted.reason ?? "reverted";
  return undefined;
}

/** Whether a send failed because the nonce was already used (a replacement raced a mined version). */
export function isNonceUsed(err: unknown): boolean {
  return /nonce too low|already known|nonce has already been used|known transaction/i.test(String(err));
}

/** A signed charge whose claim another keeper holds now: it is not broadcast. */
export class ClaimTakenError extends AppError {}
