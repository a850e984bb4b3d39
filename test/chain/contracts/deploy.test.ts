import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { erc20Abi, type Address } from "viem";
import { falseTokenAbi, subscriptionProcessorAbi, testTokenAbi } from "../../../src/chain/abis";
import { keys } from "../../../testkit/accounts";
import { createTestChain, revertOf, type TestChain } from "../../../testkit/chain";
import { runCommand } from "../../../testkit/cli";

// Starts a real anvil: more than the 5 s default on a busy machine.
setDefaultTimeout(60_000);

let chain: TestChain;

beforeAll(async () => {
  chain = await createTestChain();
});

afterAll(async () => {
  await chain?.stop();
});

const runDeploy = (env: Record<string, string>) => runCommand("src/cli/deploy.ts", env);

describe("deployToken", () => {
  test("test, false and nometa kinds", async () => {
    const read = (address: Address, functionName: "symbol" | "decimals" | "name") =>
      chain.publicClient.readContract({ address, abi: erc20Abi, functionName });

    const test6 = await chain.deployToken({ name: "Test USD", symbol: "TUSD", decimals: 6 });
    expect([await read(test6, "name"), await read(test6, "symbol"), await read(test6, "decimals")]).toEqual([
      "Test USD",
      "TUSD",
      6,
    ]);

    const falseToken = await chain.deployToken({ symbol: "FALSE", decimals: 18, kind: "false" });
    expect(await read(falseToken, "symbol")).toBe("FALSE");
    await chain.fund("alice", falseToken, 100n);
    const { result } = await chain.publicClient.simulateContract({
      address: falseToken,
      abi: erc20Abi, // FalseToken's own ABI declares transferFrom pure; callers use the ERC-20 one
      functionName: "transferFrom",
      args: [chain.address("alice"), chain.address("bob"), 1n],
      account: chain.processor,
    });
    expect(result).toBe(false);
    const transferred = await chain.publicClient.simulateContract({
      address: falseToken,
      abi: falseTokenAbi,
      functionName: "transfer",
      args: [chain.address("bob"), 1n],
      account: chain.address("alice"),
    });
    expect(transferred.result).toBe(true);

    const noMeta = await chain.deployToken({ kind: "nometa" });
    await chain.fund("alice", noMeta, 5n);
    expect(
      await chain.publicClient.readContract({
        address: noMeta,
        abi: erc20Abi,
        functionName: "balanceOf",
        args: [chain.address("alice")],
      }),
    ).toBe(5n);
    await expect(read(noMeta, "symbol")).rejects.toThrow();
    await expect(read(noMeta, "decimals")).rejects.toThrow();
  });

  test("TestToken reverts transferFrom without allowance (ERC-6093 errors)", async () => {
    const token = await chain.deployToken();
    await chain.fund("alice", token, 10n, 3n);
    const pull = (amount: bigint) =>
      chain.publicClient.simulateContract({
        address: token,
        abi: testTokenAbi,
        functionName: "transferFrom",
        args: [chain.address("alice"), chain.address("bob"), amount],
        account: chain.processor,
      });
    expect((await revertOf(pull(4n))).errorName).toBe("ERC20InsufficientAllowance");
    expect((await pull(3n)).result).toBe(true);
  });
});

describe("bun run deploy", () => {
  test("deploys the processor and prints one JSON line with chainId, lowercase address and start block", async () => {
    const { stdout, stderr, code } = await runDeploy({
      RPC_URL: chain.rpcUrl,
      DEPLOYER_PRIVATE_KEY: keys.deployer,
    });
    expect(stderr).toBe("");
    expect(code).toBe(0);
    const lines = stdout.trim().split("\n");
    expect(lines).toHaveLength(1);
    const out = JSON.parse(lines[0]!) as { chainId: number; processor: string; startBlock: string };
    expect(Object.keys(out)).toEqual(["chainId", "processor", "startBlock"]);
    expect(out.chainId).toBe(31337);
    expect(out.processor).toMatch(/^0x[0-9a-f]{40}$/);
    expect(out.startBlock).toMatch(/^\d+$/);

    const block = await chain.publicClient.getBlock({ blockNumber: BigInt(out.startBlock), includeTransactions: true });
    const receipts = await Promise.all(
      block.transactions.map((tx) => chain.publicClient.getTransactionReceipt({ hash: tx.hash })),
    );
    expect(receipts.map((r) => r.contractAddress?.toLowerCase())).toContain(out.processor);

    const processor = out.processor as Address;
    const read = <F extends "feeBps" | "feeRecipient" | "owner">(functionName: F) =>
      chain.publicClient.readContract({ address: processor, abi: subscriptionProcessorAbi, functionName });
    expect(await read("feeBps")).toBe(100);
    expect(await read("feeRecipient")).toBe(chain.address("deployer"));
    expect(await read("owner")).toBe(chain.address("deployer"));
  });

  test("FEE_BPS and FEE_RECIPIENT are applied", async () => {
    const { stdout, code } = await runDeploy({
      RPC_URL: chain.rpcUrl,
      DEPLOYER_PRIVATE_KEY: keys.merchant2,
      FEE_BPS: "1000",
      FEE_RECIPIENT: chain.address("carol").toLowerCase(),
    });
    expect(code).toBe(0);
    const processor = JSON.parse(stdout).processor as Address;
    const read = <F extends "feeBps" | "feeRecipient" | "owner">(functionName: F) =>
      chain.publicClient.readContract({ address: processor, abi: subscriptionProcessorAbi, functionName });
    expect(await read("feeBps")).toBe(1000);
    expect(await read("feeRecipient")).toBe(chain.address("carol"));
    expect(await read("owner")).toBe(chain.address("merchant2"));
  });

  const bad: [string, Record<string, string>][] = [
    ["RPC_URL", { DEPLOYER_PRIVATE_KEY: keys.deployer }],
    ["RPC_URL", { RPC_URL: "localhost:8545", DEPLOYER_PRIVATE_KEY: keys.deployer }],
    ["DEPLOYER_PRIVATE_KEY", { RPC_URL: "http://127.0.0.1:1" }],
    ["DEPLOYER_PRIVATE_KEY", { RPC_URL: "http://127.0.0.1:1", DEPLOYER_PRIVATE_KEY: "0x1234" }],
    ["FEE_BPS", { RPC_URL: "http://127.0.0.1:1", DEPLOYER_PRIVATE_KEY: keys.deployer, FEE_BPS: "1001" }],
    ["FEE_BPS", { RPC_URL: "http://127.0.0.1:1", DEPLOYER_PRIVATE_KEY: keys.deployer, FEE_BPS: "1.5" }],
    ["FEE_RECIPIENT", { RPC_URL: "http://127.0.0.1:1", DEPLOYER_PRIVATE_KEY: keys.deployer, FEE_RECIPIENT: "0xabc" }],
  ];
  for (const [variable, env] of bad) {
    test(`bad ${variable} (${JSON.stringify(env[variable] ?? null)}): message naming it, exit 1`, async () => {
      const { stdout, stderr, code } = await runDeploy(env);
      expect(code).toBe(1);
      expect(stdout).toBe("");
      expect(stderr).toContain(variable);
    });
  }

  test("an unreachable RPC_URL is named, exit 1", async () => {
    const { stdout, stderr, code } = await runDeploy({
      RPC_URL: "http://127.0.0.1:1",
      DEPLOYER_PRIVATE_KEY: keys.deployer,
    });
    expect(code).toBe(1);
    expect(stdout).toBe("");
    expect(stderr).toContain("RPC_URL http://127.0.0.1:1 did not answer");
  });
});
