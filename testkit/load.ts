/**
 * Fast event generation for indexer tests and the benchmark: a ChargeBatcher registered as a keeper charges
 * many due subscriptions (interval 1 s, time moved forward between rounds) and one unfunded subscription many
 * times per transaction (ChargeFailed leaves its schedule unchanged).
 */
import type { Address } from "viem";
import { chargeBatcherAbi, chargeBatcherBytecode, subscriptionModuleAbi } from "../src/chain/abis";
import type { TestChain } from "./chain";

/** What the generator set up and produced. */
export type Load = {
  module: Address;
  token: Address;
  batcher: Address;
  successIds: bigint[];
  failId: bigint;
  /** Payment events emitted so far (ChargeSucceeded + ChargeFailed). */
  payments: number;
};

/** Deploys the batcher, a token, a module with `successSubs` funded subscriptions and one unfunded one. */
export async function setupLoad(chain: TestChain, opts: { successSubs: number }): Promise<Load> {
  const deployer = chain.wallet("deployer");
  const hash = await deployer.deployContract({
    abi: chargeBatcherAbi,
    bytecode: chargeBatcherBytecode,
    args: [chain.processor],
    account: deployer.account,
    chain: deployer.chain ?? null,
  });
  const batcher = (await chain.send(hash)).contractAddress!;
  await chain.send(
    deployer.writeContract({ ...chain.processorContract, functionName: "setKeeper", args: [batcher, true] }),
  );
  const token = await chain.deployToken({ symbol: "LOAD", decimals: 6 });
  const module = await chain.createModule("merchant");
  await chain.fund("alice", token, 10n ** 30n);
  const successIds: bigint[] = [];
  // One plan per subscription: a wallet holds one live subscription per plan.
  for (let i = 0; i < opts.successSubs; i++) {
    await chain.createPlan("merchant", module, { planId: 1000 + i, token, amount: 1_000n + BigInt(i), interval: 1 });
    successIds.push(await chain.subscribe("alice", module, 1000 + i));
  }
  await chain.createPlan("merchant", module, { planId: 1, token, amount: 5_000n, interval: 1 });
  const failId = await chain.subscribe("bob", module, 1); // bob never approves: InsufficientAllowance
  return { module, token, batcher, successIds, failId, payments: 0 };
}

/** Runs `rounds` rounds; each charges every funded subscription once and the unfunded one `failures` times. */
export async function runLoad(chain: TestChain, load: Load, opts: { rounds: number; failures: number }): Promise<void> {
  const keeper = chain.wallet("keeper");
  for (let r = 0; r < opts.rounds; r++) {
    await chain.testClient.increaseTime({ seconds: 1 });
    if (load.successIds.length > 0) {
      await chain.send(
        keeper.writeContract({
          address: load.batcher,
          abi: chargeBatcherAbi,
          functionName: "chargeMany",
          args: [load.module, load.successIds, 1n],
          gas: 29_000_000n,
        }),
      );
      load.payments += load.successIds.length;
    }
    if (opts.failures > 0) {
      await chain.send(
        keeper.writeContract({
          address: load.batcher,
          abi: chargeBatcherAbi,
          functionName: "chargeMany",
          args: [load.module, [load.failId], BigInt(opts.failures)],
          gas: 29_000_000n,
        }),
      );
      load.payments += opts.failures;
    }
  }
}

/** Reads a subscription as the contract holds it (for spot checks against the index). */
export async function readSubscription(chain: TestChain, module: Address, id: bigint) {
  return chain.publicClient.readContract({
    address: module,
    abi: subscriptionModuleAbi,
    functionName: "getSubscription",
    args: [id],
  });
}
