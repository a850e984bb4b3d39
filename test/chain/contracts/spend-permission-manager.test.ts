import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import {
  encodeEventTopics,
  encodeFunctionData,
  erc20Abi,
  getAddress,
  hashTypedData,
  parseEventLogs,
  toFunctionSelector,
  type Abi,
  type AbiEvent,
  type AbiFunction,
  type Address,
  type TransactionReceipt,
} from "viem";
import {
  entryPointAbi,
  spendPermissionManagerAbi,
  testNftBytecode,
  testSmartAccountAbi,
  testTokenAbi,
} from "../../../src/chain/abis";
import {
  FOREVER_END,
  NATIVE_TOKEN,
  SPEND_PERMISSION_MANAGER_ADDRESS,
  SPEND_PERMISSION_TYPES,
  currentPeriod,
  periodAt,
  revokedBy,
  spendPermissionDomain,
  type SpendPermission,
} from "../../../src/domain/spend-permission";
import { accounts } from "../../../testkit/accounts";
import { createTestChain, revertOf, type TestChain } from "../../../testkit/chain";
import {
  TEST_ALLOWANCE,
  TEST_PERIOD,
  deploySpendPermissions,
  managerEvents,
  spendPermissionArtifacts,
  type SpendPermissionKit,
} from "../../../testkit/spend-permissions";

// The SDK's own copy of the manager's ABI (its package exports no path to it, so it is loaded by file).
const sdkConstants = new URL(
  "../../../node_modules/@base-org/account/dist/sign/base-account/utils/constants.js",
  import.meta.url,
);
const { spendPermissionManagerAbi: sdkManagerAbi } = (await import(sdkConstants.href)) as {
  spendPermissionManagerAbi: Abi;
};

const managerAbi = spendPermissionArtifacts().manager.abi as typeof spendPermissionManagerAbi;

// The functions and events the product relies on, with the selectors and topics the protocol publishes.
const FUNCTIONS: Record<string, string> = {
  approve: "0x33211c30",
  approveWithSignature: "0xb9ffc8e1",
  approveWithRevoke: "0x7000882d",
  revoke: "0x78792f76",
  revokeAsSpender: "0xb2c2b019",
  spend: "0x415a9735",
  isValid: "0x7fae20b5",
  getLastUpdatedPeriod: "0x54ab90c2",
  getCurrentPeriod: "0x2c18d42e",
  getHash: "0xe0a00b79",
};
const VIEWS_WITHOUT_SELECTOR = ["isApproved", "isRevoked", "NATIVE_TOKEN"];
const TOPICS: Record<string, string> = {
  SpendPermissionApproved: "0x40a18f36db551498d122b5bfe203819b4c710502e7401e2bd6d2ccc6d2ceb558",
  SpendPermissionRevoked: "0xff59e520513907d7deffc74c82b5492b06b2988d7d03dacfd4995de47fe94c95",
  SpendPermissionUsed: "0xbcba65b462dfff1a0af642e2ccd28778c64fcb16da2132dabf6eee8906d6753c",
};

type AbiError = Extract<Abi[number], { type: "error" }>;

const fragment = (abi: Abi, type: string, name: string): AbiFunction | AbiEvent | AbiError | undefined =>
  abi.find((i) => i.type === type && "name" in i && i.name === name) as AbiFunction | AbiEvent | AbiError | undefined;

describe("conformance with @base-org/account", () => {
  test("every function and event the product uses has the SDK's fragment, selector and topic", () => {
    for (const [name, selector] of Object.entries(FUNCTIONS)) {
      const ours = fragment(managerAbi, "function", name) as AbiFunction;
      expect([name, ours]).toEqual([name, fragment(sdkManagerAbi, "function", name) as AbiFunction]);
      expect<string>(toFunctionSelector(ours)).toBe(selector);
    }
    for (const name of VIEWS_WITHOUT_SELECTOR) {
      expect(fragment(managerAbi, "function", name)).toEqual(fragment(sdkManagerAbi, "function", name));
    }
    for (const [name, topic] of Object.entries(TOPICS)) {
      const ours = fragment(managerAbi, "event", name) as AbiEvent;
      expect(ours).toEqual(fragment(sdkManagerAbi, "event", name) as AbiEvent);
      expect<string | null | undefined>(encodeEventTopics({ abi: [ours], eventName: name } as never)[0]).toBe(topic);
    }
  });

  test("every error of the manager is one of the SDK's, with the same fields", () => {
    const errors = managerAbi.filter((i) => i.type === "error");
    expect(errors.length).toBeGreaterThanOrEqual(15);
    for (const e of errors) expect(fragment(sdkManagerAbi, "error", e.name)).toEqual(e);
  });

  test("the golden hash (chain 31337, the canonical manager)", () => {
    const p: SpendPermission = {
      account: "0x1111111111111111111111111111111111111111",
      spender: "0x2222222222222222222222222222222222222222",
      token: "0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913",
      allowance: 9990000n,
      period: 2592000,
      start: 1700000000,
      end: FOREVER_END,
      salt: 5n,
      extraData: "0x",
    };
    const hash = hashTypedData({
      domain: spendPermissionDomain(31337, SPEND_PERMISSION_MANAGER_ADDRESS),
      types: SPEND_PERMISSION_TYPES,
      primaryType: "SpendPermission",
      message: p,
    });
    expect(hash).toBe("0x6f4c2896687792aa802ccca5d71e1adbb9f026cd68b223e6104e33ce3e12a5da");
  });

  test("period arithmetic: anchored at start, end exclusive, the last period cut at end", () => {
    const start = 1_000_000;
    const p = { start, period: 86400, end: start + 2 * 86400 + 100 };
    expect(periodAt(p, start - 1)).toBeNull();
    expect(periodAt(p, start)).toEqual({ start, end: start + 86400, spend: 0n });
    expect(periodAt(p, start + 86399)).toEqual({ start, end: start + 86400, spend: 0n });
    expect(periodAt(p, start + 86400)).toEqual({ start: start + 86400, end: start + 172800, spend: 0n });
    expect(periodAt(p, start + 172800)).toEqual({ start: start + 172800, end: p.end, spend: 0n });
    expect(periodAt(p, p.end - 1)).toEqual({ start: start + 172800, end: p.end, spend: 0n });
    expect(periodAt(p, p.end)).toBeNull();
    const last = { start: start + 86400, end: start + 172800, spend: 7n };
    expect(currentPeriod(p, last, start + 90000)).toEqual(last);
    expect(currentPeriod(p, last, start + 172800)).toEqual({ start: start + 172800, end: p.end, spend: 0n });
  });
});

describe("the manager on anvil", () => {
  let chain: TestChain;
  let kit: SpendPermissionKit;
  let token: Address;
  let merchant: Address; // the spender: a smart account (Base Pay's shape) owned by the merchant EOA
  let alice: Address; // the subscriber's smart account, with the manager as an owner

  const read = <T>(functionName: string, args: readonly unknown[]) =>
    chain.publicClient.readContract({
      address: kit.manager,
      abi: managerAbi,
      functionName,
      args,
    } as never) as Promise<T>;
  const asAccount = (p: SpendPermission, functionName: string, args: readonly unknown[] = [p]) =>
    kit.executeAs("alice", p.account, [kit.managerCall(functionName, args)]);
  const asSpender = (p: SpendPermission, functionName: string, args: readonly unknown[]) =>
    kit.executeAs("merchant", p.spender, [kit.managerCall(functionName, args)]);
  let salt = 100n;
  const fresh = async (fields: Partial<SpendPermission> = {}) =>
    kit.permission({
      account: alice,
      spender: merchant,
      token,
      start: Number(await chain.now()),
      salt: salt++,
      ...fields,
    });

  beforeAll(async () => {
    chain = await createTestChain();
    kit = await deploySpendPermissions(chain);
    token = await chain.deployToken({ name: "USD Coin", symbol: "USDC", decimals: 6 });
    merchant = await kit.createAccount("merchant", { managerOwner: false });
    alice = await kit.createAccount("alice");
    await chain.send(
      chain.wallet("deployer").writeContract({
        address: token,
        abi: testTokenAbi,
        functionName: "mint",
        args: [alice, 1_000_000_000n],
      }),
    );
  });
  afterAll(async () => {
    await chain?.stop();
  });

  test("runs at the canonical address and its getHash is the typed-data hash", async () => {
    expect(kit.manager).toBe(getAddress(SPEND_PERMISSION_MANAGER_ADDRESS));
    const p = await fresh();
    expect(await read<string>("getHash", [p])).toBe(kit.hash(p));
    expect(await read<string>("NATIVE_TOKEN", [])).toBe(getAddress(NATIVE_TOKEN));
  });

  test("Base Pay's first charge: approveWithSignature and spend in one batch, directly and as a v0.6 user operation", async () => {
    for (const viaUserOp of [false, true]) {
      const p = await fresh();
      const signature = await kit.sign("alice", p);
      const calls = [
        kit.managerCall("approveWithSignature", [p, signature]),
        kit.managerCall("spend", [p, TEST_ALLOWANCE]),
      ];
      const before = await chain.publicClient.readContract({
        address: token,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [merchant],
      });
      const receipt = viaUserOp
        ? await kit.sendUserOp("merchant", merchant, calls)
        : await kit.executeAs("merchant", merchant, calls);
      const events = managerEvents(receipt, kit.manager);
      expect(events.map((e) => e.eventName)).toEqual(["SpendPermissionApproved", "SpendPermissionUsed"]);
      const used = events[1]!;
      if (used.eventName !== "SpendPermissionUsed") throw new Error("unreachable");
      expect(used.args.hash).toBe(kit.hash(p));
      expect(used.args.periodSpend).toEqual({ start: p.start, end: p.start + TEST_PERIOD, spend: TEST_ALLOWANCE });
      // Used, then the token's Approval to the manager, then the Transfer to the spender.
      const order = receipt.logs
        .filter((l) => [kit.manager, token].includes(getAddress(l.address)))
        .map((l) =>
          getAddress(l.address) === kit.manager
            ? "manager"
            : parseEventLogs({ abi: erc20Abi, logs: [l] })[0]!.eventName,
        );
      expect(order).toEqual(["manager", "manager", "Approval", "Transfer"]);
      const after = await chain.publicClient.readContract({
        address: token,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [merchant],
      });
      expect(after - before).toBe(TEST_ALLOWANCE);
      if (viaUserOp) {
        const ops = parseEventLogs({ abi: entryPointAbi, eventName: "UserOperationEvent", logs: receipt.logs });
        expect(ops.map((o) => [getAddress(o.args.sender), o.args.success])).toEqual([[merchant, true]]);
      }
      expect(await read<boolean>("isValid", [p])).toBe(true);
    }
  });

  test("approve's refusals, and a hash has at most one Approved and one Revoked", async () => {
    const nft = await chain.send(chain.wallet("deployer").deployContract({ abi: [], bytecode: testNftBytecode }));
    const refusals: [Partial<SpendPermission>, string][] = [
      [{ token: "0x0000000000000000000000000000000000000000" }, "ZeroToken"],
      [{ token: getAddress(nft.contractAddress!) }, "ERC721TokenNotSupported"],
      [{ spender: "0x0000000000000000000000000000000000000000" }, "ZeroSpender"],
      [{ period: 0 }, "ZeroPeriod"],
      [{ allowance: 0n }, "ZeroAllowance"],
      [{ start: 2000, end: 2000 }, "InvalidStartEnd"],
    ];
    for (const [fields, errorName] of refusals) {
      const p = await fresh(fields);
      const { errorName: got } = await revertOf(
        chain.publicClient.simulateContract({
          address: kit.manager,
          abi: managerAbi,
          functionName: "approve",
          args: [p],
          account: alice,
        }),
      );
      expect(got).toBe(errorName);
    }
    // Only the account approves.
    const p = await fresh();
    expect(
      (
        await revertOf(
          chain.publicClient.simulateContract({
            address: kit.manager,
            abi: managerAbi,
            functionName: "approve",
            args: [p],
            account: accounts.bob.address,
          }),
        )
      ).errorName,
    ).toBe("InvalidSender");

    expect(managerEvents(await asAccount(p, "approve"), kit.manager).map((e) => e.eventName)).toEqual([
      "SpendPermissionApproved",
    ]);
    expect(managerEvents(await asAccount(p, "approve"), kit.manager)).toEqual([]); // approved again: true, silent
    expect(managerEvents(await asAccount(p, "revoke"), kit.manager).map((e) => e.eventName)).toEqual([
      "SpendPermissionRevoked",
    ]);
    expect(managerEvents(await asAccount(p, "revoke"), kit.manager)).toEqual([]); // revoked once
    const again = await chain.publicClient.simulateContract({
      address: kit.manager,
      abi: managerAbi,
      functionName: "approve",
      args: [p],
      account: alice,
    });
    expect(again.result).toBe(false);
    expect(managerEvents(await asAccount(p, "approve"), kit.manager)).toEqual([]); // dead for good
    expect(await read<boolean>("isValid", [p])).toBe(false);

    // A revoke of a hash never approved emits Revoked, and no Approved can follow.
    const q = await fresh();
    expect(managerEvents(await asSpender(q, "revokeAsSpender", [q]), kit.manager).map((e) => e.eventName)).toEqual([
      "SpendPermissionRevoked",
    ]);
    expect(managerEvents(await asAccount(q, "approve"), kit.manager)).toEqual([]);
  });

  test("spends: the event carries the increment, the period its total; the cap, the start and the end", async () => {
    const now = Number(await chain.now());
    const p = await fresh({ allowance: 10n, period: 86400, start: now + 10, end: now + 10 + 2 * 86400 + 100 });
    await asAccount(p, "approve");
    expect(
      (
        await revertOf(
          chain.publicClient.simulateContract({
            address: kit.manager,
            abi: managerAbi,
            functionName: "spend",
            args: [p, 5n],
            account: merchant,
          }),
        )
      ).errorName,
    ).toBe("BeforeSpendPermissionStart");
    expect((await revertOf(read("getCurrentPeriod", [p]))).errorName).toBe("BeforeSpendPermissionStart");
    await chain.mineAt(p.start);
    const first = managerEvents(await asSpender(p, "spend", [p, 5n]), kit.manager)[0]!;
    const second = managerEvents(await asSpender(p, "spend", [p, 2n]), kit.manager)[0]!;
    expect([first.args, second.args].map((a) => ("periodSpend" in a ? a.periodSpend.spend : null))).toEqual([5n, 2n]);
    expect(await read("getLastUpdatedPeriod", [p])).toEqual({ start: p.start, end: p.start + 86400, spend: 7n });
    expect(await read("getCurrentPeriod", [p])).toEqual({ start: p.start, end: p.start + 86400, spend: 7n });
    const over = await revertOf(
      chain.publicClient.simulateContract({
        address: kit.manager,
        abi: managerAbi,
        functionName: "spend",
        args: [p, 4n],
        account: merchant,
      }),
    );
    expect(over).toEqual({ errorName: "ExceededSpendPermission", args: [11n, 10n] });
    expect(
      (
        await revertOf(
          chain.publicClient.simulateContract({
            address: kit.manager,
            abi: managerAbi,
            functionName: "spend",
            args: [p, 0n],
            account: merchant,
          }),
        )
      ).errorName,
    ).toBe("ZeroValue");
    // The next period starts fresh at start + period; the last one is cut at end.
    await chain.mineAt(p.start + 86400);
    expect(await read("getCurrentPeriod", [p])).toEqual({ start: p.start + 86400, end: p.start + 172800, spend: 0n });
    await chain.mineAt(p.start + 172800);
    await asSpender(p, "spend", [p, 10n]);
    expect(await read("getLastUpdatedPeriod", [p])).toEqual({ start: p.start + 172800, end: p.end, spend: 10n });
    await chain.mineAt(p.end);
    expect((await revertOf(read("getCurrentPeriod", [p]))).errorName).toBe("AfterSpendPermissionEnd");
    expect(
      (
        await revertOf(
          chain.publicClient.simulateContract({
            address: kit.manager,
            abi: managerAbi,
            functionName: "spend",
            args: [p, 1n],
            account: merchant,
          }),
        )
      ).errorName,
    ).toBe("AfterSpendPermissionEnd");
  });

  test("approveWithRevoke changes plan in one call: Revoked(old), then Approved(new)", async () => {
    const old = await fresh();
    await asAccount(old, "approve");
    const next = await fresh({ allowance: 2n * TEST_ALLOWANCE });
    const stale = { start: 1, end: 2, spend: 3n };
    expect(
      (
        await revertOf(
          chain.publicClient.simulateContract({
            address: kit.manager,
            abi: managerAbi,
            functionName: "approveWithRevoke",
            args: [next, old, stale],
            account: alice,
          }),
        )
      ).errorName,
    ).toBe("InvalidLastUpdatedPeriod");
    const receipt = await asAccount(next, "approveWithRevoke", [next, old, { start: 0, end: 0, spend: 0n }]);
    const events = managerEvents(receipt, kit.manager);
    expect(events.map((e) => [e.eventName, e.args.hash])).toEqual([
      ["SpendPermissionRevoked", kit.hash(old)],
      ["SpendPermissionApproved", kit.hash(next)],
    ]);
  });

  test("a native-currency spend moves wei from the account to the spender", async () => {
    const p = await fresh({ token: getAddress(NATIVE_TOKEN), allowance: 10n ** 15n });
    await asAccount(p, "approve");
    const before = await chain.publicClient.getBalance({ address: merchant });
    const receipt = await kit.executeAs("merchant", merchant, [kit.managerCall("spend", [p, 10n ** 15n])]);
    expect(managerEvents(receipt, kit.manager).map((e) => e.eventName)).toEqual(["SpendPermissionUsed"]);
    expect((await chain.publicClient.getBalance({ address: merchant })) - before).toBe(10n ** 15n);
  });

  test("with the manager removed as an owner, spend reverts Unauthorized() while isValid stays true", async () => {
    const bobAccount = await kit.createAccount("bob");
    await chain.send(
      chain
        .wallet("deployer")
        .writeContract({ address: token, abi: testTokenAbi, functionName: "mint", args: [bobAccount, TEST_ALLOWANCE] }),
    );
    const p = await fresh({ account: bobAccount });
    await kit.executeAs("bob", bobAccount, [kit.managerCall("approve", [p])]);
    await kit.executeAs("bob", bobAccount, [{ target: bobAccount, value: 0n, data: encodeRemoveOwner(kit.manager) }]);
    expect(await read<boolean>("isValid", [p])).toBe(true);
    const sim = chain.publicClient.simulateContract({
      address: merchant,
      abi: testSmartAccountAbi,
      functionName: "execute",
      args: [kit.manager, 0n, kit.managerCall("spend", [p, 1n]).data],
      account: accounts.merchant.address,
    });
    await expect(sim).rejects.toThrow(/0x82b42900|Unauthorized/);
  });
});

const encodeRemoveOwner = (owner: Address) =>
  encodeFunctionData({ abi: testSmartAccountAbi, functionName: "removeOwnerAddress", args: [owner] });

describe("who revoked, from the revoking transaction", () => {
  let chain: TestChain;
  let kit: SpendPermissionKit;
  let token: Address;
  beforeAll(async () => {
    chain = await createTestChain();
    kit = await deploySpendPermissions(chain);
    token = await chain.deployToken();
  });
  afterAll(async () => {
    await chain?.stop();
  });

  const revokedByIn = async (receipt: TransactionReceipt, p: SpendPermission) => {
    const tx = await chain.publicClient.getTransaction({ hash: receipt.transactionHash });
    const revoked = managerEvents(receipt, kit.manager).find(
      (e) => e.eventName === "SpendPermissionRevoked" && e.args.hash === kit.hash(p),
    )!;
    return revokedBy({
      revokedLogIndex: revoked.logIndex,
      account: p.account,
      spender: p.spender,
      logs: receipt.logs,
      txFrom: tx.from,
      txTo: tx.to,
      entryPoints: [kit.entryPoint],
    });
  };

  test("through the account, as the spender, as user operations, one bundle of both, and an EOA spender", async () => {
    const alice = await kit.createAccount("alice");
    const merchant = await kit.createAccount("merchant", { managerOwner: false });
    let salt = 1n;
    const approvedPermission = async (spender: Address) => {
      const p = kit.permission({ account: alice, spender, token, start: Number(await chain.now()), salt: salt++ });
      await kit.executeAs("alice", alice, [kit.managerCall("approve", [p])]);
      return p;
    };
    const viaAccount = await approvedPermission(merchant);
    expect(
      await revokedByIn(await kit.executeAs("alice", alice, [kit.managerCall("revoke", [viaAccount])]), viaAccount),
    ).toBe("subscriber");
    const asSpender = await approvedPermission(merchant);
    expect(
      await revokedByIn(
        await kit.executeAs("merchant", merchant, [kit.managerCall("revokeAsSpender", [asSpender])]),
        asSpender,
      ),
    ).toBe("merchant");
    const userOp = await approvedPermission(merchant);
    expect(await revokedByIn(await kit.sendUserOp("alice", alice, [kit.managerCall("revoke", [userOp])]), userOp)).toBe(
      "subscriber",
    );
    const [user, spender] = [await approvedPermission(merchant), await approvedPermission(merchant)];
    const bundle = await kit.sendUserOps([
      { owner: "alice", account: alice, calls: [kit.managerCall("revoke", [user])] },
      { owner: "merchant", account: merchant, calls: [kit.managerCall("revokeAsSpender", [spender])] },
    ]);
    expect([await revokedByIn(bundle, user), await revokedByIn(bundle, spender)]).toEqual(["subscriber", "merchant"]);
    const eoaSpender = await approvedPermission(accounts.merchant2.address);
    const direct = await chain.send(
      chain
        .wallet("merchant2")
        .writeContract({ address: kit.manager, abi: managerAbi, functionName: "revokeAsSpender", args: [eoaSpender] }),
    );
    expect(await revokedByIn(direct, eoaSpender)).toBe("merchant");
    // A relayer that is neither: the EntryPoint is not trusted, so the user operation does not count either.
    const relayed = await approvedPermission(merchant);
    const receipt = await kit.sendUserOp("alice", alice, [kit.managerCall("revoke", [relayed])]);
    const tx = await chain.publicClient.getTransaction({ hash: receipt.transactionHash });
    const log = managerEvents(receipt, kit.manager)[0]!;
    expect(
      revokedBy({
        revokedLogIndex: log.logIndex,
        account: alice,
        spender: merchant,
        logs: receipt.logs,
        txFrom: tx.from,
        txTo: tx.to,
        entryPoints: [],
      }),
    ).toBe("unknown");
  });
});
