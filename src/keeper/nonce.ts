import type { Hash, Hex } from "viem";
import type { Fees, KeeperContext, KeeperWallet } from "./types";

/** One transaction to the processor: calldata, gas limit and fees. */
export type TxRequest = { data: Hex; gas: bigint; fees: Fees };

/** The keeper's nonces: read once from the node, counted locally, sends serialized so they go out in order. */
export type NonceManager = {
  /** Sends `tx` with the next nonce; a failed send forgets the count, so the next send re-reads it. */
  send: (tx: TxRequest) => Promise<{ hash: Hash; nonce: number }>;
  /** Sends `tx` at a nonce already used (a replacement); the count does not move. */
  resend: (nonce: number, tx: TxRequest) => Promise<Hash>;
  /** Forgets the count (another sender moved the account's nonce, or a transaction was given up). */
  reset: () => void;
  /**
   * Forgets the count when it is ahead of the chain by more than the `unmined` sends still waiting: a reorg dropped
   * sends that had been mined, and their nonces are free again (the next send would wait behind a gap forever).
   */
  check: (unmined: number) => Promise<void>;
};

/** Creates the nonce manager of one keeper account. */
export function createNonceManager(ctx: KeeperContext): NonceManager {
  const { client, wallet, chain, processor, address } = ctx;
  let nonce: number | undefined;
  let queue: Promise<unknown> = Promise.resolve();

  const transmit = (n: number, tx: TxRequest) =>
    wallet.sendTransaction({
      account: wallet.account,
      chain,
      to: processor,
      data: tx.data,
      gas: tx.gas,
      nonce: n,
      ...tx.fees,
    } as Parameters<KeeperWallet["sendTransaction"]>[0]);

  const serialized = <T>(run: () => Promise<T>): Promise<T> => {
    const result = queue.then(run, run);
    queue = result.catch(() => {});
    return result;
  };

  return {
    send: (tx) =>
      serialized(async () => {
        if (nonce === undefined) nonce = await client.getTransactionCount({ address, blockTag: "pending" });
        const n = nonce;
        try {
          const hash = await transmit(n, tx);
          nonce = n + 1;
          return { hash, nonce: n };
        } catch (err) {
          nonce = undefined;
          throw err;
        }
      }),
    resend: (n, tx) => serialized(() => transmit(n, tx)),
    reset: () => {
      nonce = undefined;
    },
    check: (unmined) =>
      serialized(async () => {
        if (nonce === undefined) return;
        const onChain = await client.getTransactionCount({ address, blockTag: "latest" });
        if (nonce > onChain + unmined) nonce = undefined;
      }),
  };
}
