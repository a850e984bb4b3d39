/**
 * A real anvil chain with the protocol deployed, for tests of the contracts, the indexer and the keeper.
 *
 *   const chain = await createTestChain();            // beforeAll
 *   const token = await chain.deployToken();
 *   const module = await chain.createModule("merchant");
 *   await chain.createPlan("merchant", module, { planId: 1, token, amount: 1_000_000n, interval: 86_400 });
 *   await chain.fund("alice", token, 10_000_000n);    // mint + approve the processor
 *   const id = await chain.subscribe("alice", module, 1);
 *   const receipt = await chain.charge(module, id);  // as the registered keeper
 *   await chain.send(chain.wallet("alice").writeContract({ address: module, abi: subscriptionModuleAbi,
 *     functionName: "pause", args: [id] }));          // any other transaction
 *   const { errorName } = await revertOf(chain.charge(module, id));   // a custom error, e.g. "NotChargeable"
 *   await chain.stop();                               // afterAll
 *
 * Isolate tests with `const snap = await chain.snapshot()` / `await chain.revert(snap)` (ids are single-use).
 */
import {
  BaseError,
  ContractFunctionRevertedError,
  createPublicClient,
  createTestClient,
  createWalletClient,
  decodeErrorResult,
  getAddress,
  http,
  maxUint256,
  parseEventLogs,
  type Account,
  type Address,
  type Chain,
  type Hash,
  type Hex,
  type PublicClient,
  type TestClient,
  type TransactionReceipt,
  type Transport,
  type WalletClient,
} from "viem";
import { foundry } from "viem/chains";
import { startAnvil, type Anvil } from "../src/chain/anvil";
import { installMulticall3 } from "../src/chain/multicall3";
import { subscriptionModuleAbi, subscriptionProcessorAbi, testTokenAbi } from "../src/chain/abis";
import {
  createModule as createModuleTx,
  deployProtocol,
  deployToken as deployTokenTx,
  type TokenKind,
} from "../src/chain/deploy";
import { accounts } from "./accounts";

/** A named anvil account from testkit/accounts.ts. */
export type WalletName = keyof typeof accounts;

/** A wallet client bound to the test chain and one named account. */
export type TestWallet = WalletClient<Transport, Chain, Account>;

/** Default protocol fee of the test chain, in basis points. */
export const TEST_FEE_BPS = 250;

/** Default fee recipient: a keyless address that starts with no balance, so its balance is the sum of fees. */
export const TEST_FEE_RECIPIENT: Address = getAddress("0x000000000000000000000000000000000000fee5");

/** What `createTestChain` returns; every transaction helper waits for the receipt and throws if it reverted. */
export type TestChain = {
  anvil: Anvil;
  rpcUrl: string;
  chainId: number;
  /** Public client with `cacheTime: 0`. */
  publicClient: PublicClient;
  /** anvil test actions: mine, setNextBlockTimestamp, increaseTime, snapshot, revert, … */
  testClient: TestClient<"anvil">;
  /** Wallet client of a named account (one per name, cached). */
  wallet: (name: WalletName) => TestWallet;
  /** Address of a named account. */
  address: (name: WalletName) => Address;
  processor: Address;
  /** `{ address: processor, abi: subscriptionProcessorAbi }`, to spread into read/writeContract. */
  processorContract: { address: Address; abi: typeof subscriptionProcessorAbi };
  /** Block of the processor deploy transaction. */
  startBlock: bigint;
  feeBps: number;
  feeRecipient: Address;
  /** The keeper registered at setup (`accounts.keeper`). */
  keeper: Address;
  /** Waits for a transaction (or its pending hash) and returns the receipt; throws if it reverted. */
  send: (tx: Hash | Promise<Hash>) => Promise<TransactionReceipt>;
  /** Deploys a token as the deployer; defaults: "Test USD", "TUSD", 6 decimals, kind "test". */
  deployToken: (opts?: { name?: string; symbol?: string; decimals?: number; kind?: TokenKind }) => Promise<Address>;
  /** Creates a SubscriptionModule owned by `owner`. */
  createModule: (owner: WalletName) => Promise<Address>;
  /** Creates a plan on `module` as `owner` (gracePeriod defaults to 0). */
  createPlan: (
    owner: WalletName,
    module: Address,
    plan: { planId: number; token: Address; amount: bigint; interval: number; gracePeriod?: number },
  ) => Promise<TransactionReceipt>;
  /** Mints `amount` of a test token to `name` and approves the processor for `approve` (default: unlimited). */
  fund: (name: WalletName, token: Address, amount: bigint, approve?: bigint) => Promise<void>;
  /** Subscribes `name` to a plan and returns the new subscription id from `SubscriptionCreated`. */
  subscribe: (
    name: WalletName,
    module: Address,
    planId: number,
    opts?: { maxExecutions?: number; allowanceExpiry?: bigint },
  ) => Promise<bigint>;
  /** Calls `processor.charge(module, id)` as `caller` (default "keeper"); a ChargeFailed still resolves. */
  charge: (module: Address, id: bigint, caller?: WalletName) => Promise<TransactionReceipt>;
  /** Timestamp of the latest block. */
  now: () => Promise<bigint>;
  /** Mines one block at exactly `timestamp` and returns its number. */
  mineAt: (timestamp: bigint | number) => Promise<bigint>;
  /** Makes the next mined block (e.g. the next transaction's) carry exactly `timestamp`. */
  setNextTimestamp: (timestamp: bigint | number) => Promise<void>;
  snapshot: () => Promise<Hex>;
  revert: (id: Hex) => Promise<void>;
  /** Stops anvil. */
  stop: () => Promise<void>;
};

/** Options of `createTestChain`; `anvil` is passed to `startAnvil` (e.g. `{ blockTime: 1 }`). */
export type TestChainOptions = {
  feeBps?: number;
  feeRecipient?: Address;
  anvil?: Parameters<typeof startAnvil>[0];
  /** false: leave Multicall3 out (a chain without it). */
  multicall?: boolean;
};

/** Starts anvil, deploys the processor (fee 250 bps to TEST_FEE_RECIPIENT) and registers `accounts.keeper`. */
export async function createTestChain(opts: TestChainOptions = {}): Promise<TestChain> {
  const anvil = await startAnvil(opts.anvil);
  try {
    return await setup(anvil, opts);
  } catch (err) {
    await anvil.stop();
    throw err;
  }
}

async function setup(anvil: Anvil, opts: TestChainOptions): Promise<TestChain> {
  // Multicall3 at its canonical address, as on public chains (renewal outlooks read through it).
  if (opts.multicall !== false) await installMulticall3(anvil.rpcUrl);
  const chain = { ...foundry, id: anvil.chainId, rpcUrls: { default: { http: [anvil.rpcUrl] } } };
  const transport = http(anvil.rpcUrl, { retryCount: 0 });
  const publicClient = createPublicClient({ chain, transport, cacheTime: 0, pollingInterval: 20 }) as PublicClient;
  const testClient = createTestClient({ chain, transport, mode: "anvil", cacheTime: 0 });
  const wallets = new Map<WalletName, TestWallet>();
  const wallet = (name: WalletName): TestWallet => {
    let w = wallets.get(name);
    if (!w) {
      w = createWalletClient({ chain, transport, account: accounts[name], cacheTime: 0, pollingInterval: 20 });
      wallets.set(name, w);
    }
    return w;
  };

  const send = async (tx: Hash | Promise<Hash>): Promise<TransactionReceipt> => {
    const hash = await tx;
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 });
    if (receipt.status !== "success") throw new Error(`transaction ${hash} reverted`);
    return receipt;
  };

  const feeBps = opts.feeBps ?? TEST_FEE_BPS;
  const feeRecipient = opts.feeRecipient ?? TEST_FEE_RECIPIENT;
  const { processor, startBlock } = await deployProtocol({
    walletClient: wallet("deployer"),
    publicClient,
    feeBps,
    feeRecipient,
  });
  const processorContract = { address: processor, abi: subscriptionProcessorAbi } as const;
  const keeper = accounts.keeper.address;
  await send(
    wallet("deployer").writeContract({ ...processorContract, functionName: "setKeeper", args: [keeper, true] }),
  );

  return {
    anvil,
    rpcUrl: anvil.rpcUrl,
    chainId: anvil.chainId,
    publicClient,
    testClient,
    wallet,
    address: (name) => accounts[name].address,
    processor,
    processorContract,
    startBlock,
    feeBps,
    feeRecipient,
    keeper,
    send,
    deployToken: (o = {}) =>
      deployTokenTx(wallet("deployer"), publicClient, {
        name: o.name ?? "Test USD",
        symbol: o.symbol ?? "TUSD",
        decimals: o.decimals ?? 6,
        kind: o.kind,
      }),
    createModule: (owner) => createModuleTx(wallet(owner), publicClient, processor),
    createPlan: (owner, module, p) =>
      send(
        wallet(owner).writeContract({
          address: module,
          abi: subscriptionModuleAbi,
          functionName: "createPlan",
          args: [p.planId, p.token, p.amount, p.interval, p.gracePeriod ?? 0],
        }),
      ),
    fund: async (name, token, amount, approve = maxUint256) => {
      const to = accounts[name].address;
      await send(
        wallet("deployer").writeContract({
          address: token,
          abi: testTokenAbi,
          functionName: "mint",
          args: [to, amount],
        }),
      );
      await send(
        wallet(name).writeContract({
          address: token,
          abi: testTokenAbi,
          functionName: "approve",
          args: [processor, approve],
        }),
      );
    },
    subscribe: async (name, module, planId, o = {}) => {
      const receipt = await send(
        wallet(name).writeContract({
          address: module,
          abi: subscriptionModuleAbi,
          functionName: "subscribe",
          args: [planId, o.maxExecutions ?? 0, o.allowanceExpiry ?? 0n],
        }),
      );
      const [event] = parseEventLogs({
        abi: subscriptionModuleAbi,
        eventName: "SubscriptionCreated",
        logs: receipt.logs,
      });
      if (!event) throw new Error("subscribe emitted no SubscriptionCreated");
      return event.args.subscriptionId;
    },
    charge: (module, id, caller = "keeper") =>
      send(wallet(caller).writeContract({ ...processorContract, functionName: "charge", args: [module, id] })),
    now: async () => (await publicClient.getBlock({ blockTag: "latest" })).timestamp,
    mineAt: async (timestamp) => {
      await testClient.setNextBlockTimestamp({ timestamp: BigInt(timestamp) });
      await testClient.mine({ blocks: 1 });
      return publicClient.getBlockNumber({ cacheTime: 0 });
    },
    setNextTimestamp: (timestamp) => testClient.setNextBlockTimestamp({ timestamp: BigInt(timestamp) }),
    snapshot: () => testClient.snapshot(),
    revert: (id) => testClient.revert({ id }),
    stop: () => anvil.stop(),
  };
}

const knownErrors = [...subscriptionProcessorAbi, ...subscriptionModuleAbi, ...testTokenAbi].filter(
  (item) => item.type === "error",
);

/**
 * The custom error a call, transaction or deployment reverted with. viem decodes it with the ABI of the call;
 * raw revert data (e.g. from a deployment) is decoded with the protocol and TestToken errors.
 */
export async function revertOf(p: Promise<unknown>): Promise<{ errorName: string; args: readonly unknown[] }> {
  try {
    await p;
  } catch (err) {
    if (!(err instanceof BaseError)) throw err;
    const reverted = err.walk((e) => e instanceof ContractFunctionRevertedError);
    if (reverted instanceof ContractFunctionRevertedError && reverted.data) {
      return { errorName: reverted.data.errorName, args: reverted.data.args ?? [] };
    }
    const raw = err.walk((e) => typeof (e as { data?: unknown }).data === "string") as { data?: Hex } | null;
    if (raw?.data && raw.data.length >= 10) {
      const decoded = decodeErrorResult({ abi: knownErrors, data: raw.data });
      return { errorName: decoded.errorName, args: decoded.args ?? [] };
    }
    throw err;
  }
  throw new Error("expected a revert, but the call succeeded");
}
