import { keccak256, TransactionNotFoundError, type Hash, type Hex, type LocalAccount, type Transaction } from "viem";
import type { Fees, KeeperContext } from "./types";

/** One transaction to the keeper's target (processor or manager): calldata, gas limit and fees. */
export type TxRequest = { data: Hex; gas: bigint; fees: Fees };

/**
 * Told of a signed transaction (its hash and nonce) before it is broadcast, to record it; a throw keeps it unsent
 * (the nonce is not used).
 */
export type BeforeBroadcast = (signed: { hash: Hash; nonce: number }) => Promise<void>;

/** The keeper's nonces: read once from the node, counted locally, sends serialized so they go out in order. */
export type NonceManager = {
  /**
   * Signs `tx` with the next nonce, hands it to `record`, then broadcasts it; a failed send forgets the count, so the
   * next send re-reads it.
   */
  send: (tx: TxRequest, record: BeforeBroadcast) => Promise<{ hash: Hash; nonce: number }>;
  /** The same at a nonce already used (a replacement); the count does not move. */
  resend: (nonce: number, tx: TxRequest, record: BeforeBroadcast) => Promise<Hash>;
  /** Forgets the count (another sender moved the account's nonce, or a transaction was given up). */
  reset: () => void;
  /**
   * Forgets the count when it is ahead of the chain by more than the `unmined` sends still waiting: a reorg dropped
   * sends that had been mined, and their nonces are free again (the next send would wait behind a gap forever).
   */
  check: (unmined: number) => Promise<void>;
};

/** The transaction as the node has it, pending or mined, or null when it does not (a failed question throws). */
export async function nodeTransaction(client: KeeperContext["client"], hash: Hash): Promise<Transaction | null> {
  try {
    return await client.getTransaction({ hash });
  } catch (err) {
    if (err instanceof TransactionNotFoundError) return null;
    throw err;
  }
}

/** Whether the node has the transaction, pending or mined (a failed question throws). */
export async function nodeKnows(client: KeeperContext["client"], hash: Hash): Promise<boolean> {
  return (await nodeTransaction(client, hash)) !== null;
}

/** Creates the nonce manager of one keeper account (a local account: it signs here, the node only broadcasts). */
export function createNonceManager(ctx: KeeperContext): NonceManager {
  const { client, wallet, chain, target, address } = ctx;
  const account = wallet.account as LocalAccount;
  let nonce: number | undefined;
  let queue: Promise<unknown> = Promise.resolve();

  /**
   * Signs locally (the hash is known before the node sees the transaction), records, then broadcasts
   * (`eth_sendRawTransaction`): a failed record broadcasts nothing.
   */
  const transmit = async (n: number, tx: TxRequest, record: BeforeBroadcast): Promise<Hash> => {
    const raw = await account.signTransaction(
      { chainId: chain.id, to: target.address, data: tx.data, gas: tx.gas, nonce: n, ...tx.fees },
      { serializer: chain.serializers?.transaction },
    );
    const hash = keccak256(raw);
    await record({ hash, nonce: n });
    try {
      await wallet.sendRawTransaction({ serializedTransaction: raw });
    } catch (err) {
      // An answer lost on the way back (a timeout, a dropped connection) after the node took it: it is sent.
      if (!(await nodeKnows(client, hash).catch(() => false))) throw err;
    }
    return hash;
  };

  const serialized = <T>(run: () => Promise<T>): Promise<T> => {
    const result = queue.then(run, run);
    queue = result.catch(() => {});
    return result;
  };

  return {
    send: (tx, record) =>
      serialized(async () => {
        if (nonce === undefined) nonce = await client.getTransactionCount({ address, blockTag: "pending" });
        const n = nonce;
        try {
          const hash = await transmit(n, tx, record);
          nonce = n + 1;
          return { hash, nonce: n };
        } catch (err) {
          nonce = undefined;
          throw err;
        }
      }),
    resend: (n, tx, record) => serialized(() => transmit(n, tx, record)),
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
