import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import {
  encodeFunctionData,
  getAddress,
  hashTypedData,
  parseEventLogs,
  type Abi,
  type Address,
  type Hash,
  type Hex,
  type TransactionReceipt,
} from "viem";
import {
  entryPointAbi,
  entryPointBytecode,
  spendPermissionManagerAbi,
  spendPermissionManagerBytecode,
  testSmartAccountAbi,
  testSmartAccountBytecode,
} from "../src/chain/abis";
import {
  FOREVER_END,
  SPEND_PERMISSION_MANAGER_ADDRESS,
  SPEND_PERMISSION_TYPES,
  spendPermissionDomain,
  type SpendPermission,
} from "../src/domain/spend-permission";
import { accounts } from "./accounts";
import type { SpendPermissionSource } from "../src/common/config";
import type { TestChain, WalletName } from "./chain";

/**
 * Spend Permissions on a test chain: the manager (the project's own, or the artifacts of `SPM_ARTIFACTS_DIR`), smart
 * accounts, signed permissions, calls through an account and ERC-4337 v0.6 user operations.
 *
 * `SPM_ARTIFACTS_DIR` names a folder with `SpendPermissionManager.json` (and optionally `EntryPoint.json`), each
 * `{ abi, bytecode }`: the same suites then run against that manager. Accounts are always the project's
 * `TestSmartAccount` (an owner list, `execute`/`executeBatch`, ERC-1271 over the raw hash, v0.6 user operations).
 */

type Artifact = { abi: Abi; bytecode: Hex };

/** Where the manager and EntryPoint come from: the project's contracts, or `SPM_ARTIFACTS_DIR`. */
export function spendPermissionArtifacts(dir = process.env.SPM_ARTIFACTS_DIR): {
  source: string;
  manager: Artifact;
  entryPoint: Artifact;
} {
  const own = {
    manager: { abi: spendPermissionManagerAbi as Abi, bytecode: spendPermissionManagerBytecode },
    entryPoint: { abi: entryPointAbi as Abi, bytecode: entryPointBytecode },
  };
  if (!dir) return { source: "project contracts", ...own };
  const read = (name: string): Artifact | undefined => {
    const file = join(dir, `${name}.json`);
    if (!existsSync(file)) return undefined;
    const json = JSON.parse(readFileSync(file, "utf8")) as { abi: Abi; bytecode: Hex | { object: Hex } };
    const bytecode = typeof json.bytecode === "string" ? json.bytecode : json.bytecode.object;
    return { abi: json.abi, bytecode: bytecode.startsWith("0x") ? bytecode : (`0x${bytecode}` as Hex) };
  };
  const manager = read("SpendPermissionManager");
  if (!manager) throw new Error(`SPM_ARTIFACTS_DIR=${dir} has no SpendPermissionManager.json`);
  return { source: dir, manager, entryPoint: read("EntryPoint") ?? own.entryPoint };
}

/** The deployed contracts of a spend-permission test chain. */
export type SpendPermissionKit = {
  manager: Address;
  entryPoint: Address;
  /** Deploys a smart account owned by `owner` (and by the manager unless `managerOwner: false`). */
  createAccount: (owner: WalletName, opts?: { managerOwner?: boolean }) => Promise<Address>;
  /** A permission of `account` for `spender` with the test defaults (allowance 9,990,000, 30 days, from now). */
  permission: (
    fields: Partial<SpendPermission> & Pick<SpendPermission, "account" | "spender" | "token">,
  ) => SpendPermission;
  /** The EIP-712 hash of `p` under this manager (what `getHash` returns). */
  hash: (p: SpendPermission) => Hex;
  /** The owner's ERC-1271 signature of `p`'s hash, for `approveWithSignature`. */
  sign: (owner: WalletName, p: SpendPermission) => Promise<Hex>;
  /** Calls made by `account` through `executeBatch`, sent by its owner EOA. */
  executeAs: (owner: WalletName, account: Address, calls: Call[]) => Promise<TransactionReceipt>;
  /** The same calls as one v0.6 user operation of `account`, signed by `owner`, bundled by `bundler`. */
  sendUserOp: (owner: WalletName, account: Address, calls: Call[], bundler?: WalletName) => Promise<TransactionReceipt>;
  /** Several user operations (of different accounts) in one `handleOps` bundle, in order. */
  sendUserOps: (
    ops: { owner: WalletName; account: Address; calls: Call[] }[],
    bundler?: WalletName,
  ) => Promise<TransactionReceipt>;
  /** Calldata of a manager function, for `executeAs`/`sendUserOp` calls. */
  managerCall: (functionName: string, args: readonly unknown[]) => Call;
  /** The indexing source of this manager for `spenders` from the chain's start block (grace 1 day by default). */
  source: (spenders: string[], opts?: { graceS?: number }) => SpendPermissionSource;
};

/** One call of an account's batch. */
export type Call = { target: Address; value: bigint; data: Hex };

/** Default plan of the acceptance tests: USDC-like allowance, 30-day period. */
export const TEST_ALLOWANCE = 9_990_000n;
export const TEST_PERIOD = 2_592_000;

/**
 * Deploys the manager (at its canonical address unless `canonical: false`) and an EntryPoint v0.6 on `chain`.
 * The canonical placement copies the deployed runtime code with `anvil_setCode`: the manager keeps no
 * address-dependent immutables, so its EIP-712 domain follows the address it runs at.
 */
export async function deploySpendPermissions(
  chain: TestChain,
  opts: { canonical?: boolean } = {},
): Promise<SpendPermissionKit> {
  const artifacts = spendPermissionArtifacts();
  const deployer = chain.wallet("deployer");
  const deploy = async (artifact: Artifact, args: readonly unknown[] = []): Promise<Address> => {
    const hash = await deployer.deployContract({ abi: artifact.abi, bytecode: artifact.bytecode, args });
    const receipt = await chain.send(hash);
    if (!receipt.contractAddress) throw new Error("deployment produced no contract");
    return getAddress(receipt.contractAddress);
  };
  const entryPoint = await deploy(artifacts.entryPoint);
  let manager = await deploy(artifacts.manager, [
    "0xcfCE48B757601F3f351CB6f434CB0517aEEE293D",
    "0x011A61C07DbF256A68256B1cB51A5e246730aB92",
  ]);
  if (opts.canonical !== false) {
    const code = await chain.publicClient.getCode({ address: manager });
    await chain.testClient.setCode({ address: SPEND_PERMISSION_MANAGER_ADDRESS, bytecode: code! });
    manager = getAddress(SPEND_PERMISSION_MANAGER_ADDRESS);
  }
  const managerAbi = artifacts.manager.abi;

  const hash = (p: SpendPermission): Hex =>
    hashTypedData({
      domain: spendPermissionDomain(chain.chainId, manager),
      types: SPEND_PERMISSION_TYPES,
      primaryType: "SpendPermission",
      message: p,
    });

  const executeAs = (owner: WalletName, account: Address, calls: Call[]) =>
    chain.send(
      chain.wallet(owner).writeContract({
        address: account,
        abi: testSmartAccountAbi,
        functionName: "executeBatch",
        args: [calls],
        gas: 3_000_000n,
      }),
    );

  const userOp = async (owner: WalletName, account: Address, calls: Call[]) => {
    const nonce = (await chain.publicClient.readContract({
      address: entryPoint,
      abi: entryPointAbi,
      functionName: "getNonce",
      args: [account, 0n],
    })) as bigint;
    const block = await chain.publicClient.getBlock();
    const op = {
      sender: account,
      nonce,
      initCode: "0x" as Hex,
      callData: encodeFunctionData({ abi: testSmartAccountAbi, functionName: "executeBatch", args: [calls] }),
      callGasLimit: 2_000_000n,
      verificationGasLimit: 300_000n,
      preVerificationGas: 60_000n,
      maxFeePerGas: (block.baseFeePerGas ?? 1_000_000_000n) * 2n + 1_000_000_000n,
      maxPriorityFeePerGas: 1_000_000_000n,
      paymasterAndData: "0x" as Hex,
      signature: "0x" as Hex,
    };
    const opHash = (await chain.publicClient.readContract({
      address: entryPoint,
      abi: entryPointAbi,
      functionName: "getUserOpHash",
      args: [op],
    })) as Hash;
    op.signature = await accounts[owner].signMessage({ message: { raw: opHash } });
    return op;
  };

  const sendUserOps = async (
    ops: { owner: WalletName; account: Address; calls: Call[] }[],
    bundler: WalletName = "keeper2",
  ) => {
    const built = [];
    for (const o of ops) built.push(await userOp(o.owner, o.account, o.calls));
    return chain.send(
      chain.wallet(bundler).writeContract({
        address: entryPoint,
        abi: entryPointAbi,
        functionName: "handleOps",
        args: [built, accounts[bundler].address],
        gas: 8_000_000n,
      }),
    );
  };

  return {
    manager,
    entryPoint,
    createAccount: async (owner, o = {}) => {
      const owners = o.managerOwner === false ? [accounts[owner].address] : [accounts[owner].address, manager];
      const account = await deploy({ abi: testSmartAccountAbi as Abi, bytecode: testSmartAccountBytecode }, [
        entryPoint,
        owners,
      ]);
      // Gas for its own user operations (the EntryPoint takes the prefund from the account).
      await chain.testClient.setBalance({ address: account, value: 10n ** 18n });
      return account;
    },
    permission: (fields) => ({
      allowance: TEST_ALLOWANCE,
      period: TEST_PERIOD,
      start: 0,
      end: FOREVER_END,
      salt: 0n,
      extraData: "0x",
      ...fields,
    }),
    hash,
    sign: (owner, p) => accounts[owner].sign({ hash: hash(p) }),
    executeAs,
    sendUserOp: (owner, account, calls, bundler) => sendUserOps([{ owner, account, calls }], bundler),
    sendUserOps,
    managerCall: (functionName, args) => ({
      target: manager,
      value: 0n,
      data: encodeFunctionData({ abi: managerAbi, functionName, args } as Parameters<typeof encodeFunctionData>[0]),
    }),
    source: (spenders, o = {}) => ({
      manager: manager.toLowerCase(),
      spenders: [...new Set(spenders.map((a) => a.toLowerCase()))].sort(),
      startBlock: Number(chain.startBlock),
      graceS: o.graceS ?? 86_400,
      entryPoints: [entryPoint.toLowerCase()],
    }),
  };
}

/** The manager's events in a receipt, decoded, in log order. */
export function managerEvents(receipt: TransactionReceipt, manager: Address) {
  return parseEventLogs({
    abi: spendPermissionManagerAbi,
    logs: receipt.logs.filter((l) => getAddress(l.address) === getAddress(manager)),
  });
}
