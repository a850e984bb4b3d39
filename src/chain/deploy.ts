import { AppError } from "../common/errors";
import {
  getAddress,
  parseEventLogs,
  type Account,
  type Address,
  type Chain,
  type Hash,
  type PublicClient,
  type Transport,
  type WalletClient,
} from "viem";
import {
  falseTokenAbi,
  falseTokenBytecode,
  noMetaTokenAbi,
  noMetaTokenBytecode,
  subscriptionProcessorAbi,
  subscriptionProcessorBytecode,
  testTokenAbi,
  testTokenBytecode,
} from "./abis";

/** A wallet client with an account attached (its chain may be unset). */
export type DeployWallet = WalletClient<Transport, Chain | undefined, Account>;

/** Kinds of test token: plain, `transferFrom` always false, or without symbol()/decimals(). */
export type TokenKind = "test" | "false" | "nometa";

/** Thrown when a deploy or setup transaction is mined but reverted or did not produce what was expected. */
export class DeployError extends AppError {}

async function mined(publicClient: PublicClient, hash: Hash) {
  const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 50 });
  if (receipt.status !== "success") throw new DeployError(`transaction ${hash} reverted`);
  return receipt;
}

/** Deploys SubscriptionProcessor; `startBlock` is the block of the deploy transaction (index from it). */
export async function deployProtocol(opts: {
  walletClient: DeployWallet;
  publicClient: PublicClient;
  feeBps: number;
  feeRecipient: Address;
}): Promise<{ processor: Address; startBlock: bigint }> {
  const { walletClient, publicClient } = opts;
  const hash = await walletClient.deployContract({
    abi: subscriptionProcessorAbi,
    bytecode: subscriptionProcessorBytecode,
    args: [opts.feeBps, opts.feeRecipient],
    account: walletClient.account,
    chain: walletClient.chain ?? null,
  });
  const receipt = await mined(publicClient, hash);
  if (!receipt.contractAddress) throw new DeployError(`deploy transaction ${hash} created no contract`);
  return { processor: getAddress(receipt.contractAddress), startBlock: receipt.blockNumber };
}

/** Deploys a TestToken (default), FalseToken or NoMetaToken (which ignores name/symbol/decimals). */
export async function deployToken(
  walletClient: DeployWallet,
  publicClient: PublicClient,
  opts: { name: string; symbol: string; decimals: number; kind?: TokenKind },
): Promise<Address> {
  const common = { account: walletClient.account, chain: walletClient.chain ?? null } as const;
  const args = [opts.name, opts.symbol, opts.decimals] as const;
  const kind = opts.kind ?? "test";
  const hash =
    kind === "nometa"
      ? await walletClient.deployContract({ ...common, abi: noMetaTokenAbi, bytecode: noMetaTokenBytecode })
      : kind === "false"
        ? await walletClient.deployContract({ ...common, abi: falseTokenAbi, bytecode: falseTokenBytecode, args })
        : await walletClient.deployContract({ ...common, abi: testTokenAbi, bytecode: testTokenBytecode, args });
  const receipt = await mined(publicClient, hash);
  if (!receipt.contractAddress) throw new DeployError(`deploy transaction ${hash} created no contract`);
  return getAddress(receipt.contractAddress);
}

/** Creates a SubscriptionModule owned by the wallet's account; returns its address from `ModuleCreated`. */
export async function createModule(
  walletClient: DeployWallet,
  publicClient: PublicClient,
  processor: Address,
): Promise<Address> {
  const hash = await walletClient.writeContract({
    address: processor,
    abi: subscriptionProcessorAbi,
    functionName: "createModule",
    account: walletClient.account,
    chain: walletClient.chain ?? null,
  });
  const receipt = await mined(publicClient, hash);
  const [event] = parseEventLogs({ abi: subscriptionProcessorAbi, eventName: "ModuleCreated", logs: receipt.logs });
  if (!event) throw new DeployError(`createModule transaction ${hash} emitted no ModuleCreated`);
  return event.args.module;
}
