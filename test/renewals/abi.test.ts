import { describe, expect, test } from "bun:test";
import fc from "fast-check";
import {
  decodeFunctionResult,
  encodeFunctionData,
  encodeFunctionResult,
  erc20Abi,
  multicall3Abi,
  type Address,
  type Hex,
} from "viem";
import { subscriptionProcessorAbi, testSmartAccountAbi } from "../../src/chain/abis";
import {
  aggregate3Data,
  aggregate3Words,
  allowanceData,
  balanceOfData,
  creditOfData,
  getEthBalanceData,
  isOwnerAddressData,
} from "../../src/renewals/abi";

const address = fc
  .uint8Array({ minLength: 20, maxLength: 20 })
  .map((b) => `0x${Buffer.from(b).toString("hex")}` as Address);
const bytes = fc.uint8Array({ maxLength: 100 }).map((b) => `0x${Buffer.from(b).toString("hex")}` as Hex);
const uint256 = fc.bigInt({ min: 0n, max: 2n ** 256n - 1n });

describe("the reader's ABI coding agrees with viem's", () => {
  test("balanceOf, allowance, creditOf", () => {
    fc.assert(
      fc.property(address, address, uint256, (a, b, n) => {
        expect(balanceOfData(a)).toBe(encodeFunctionData({ abi: erc20Abi, functionName: "balanceOf", args: [a] }));
        expect(allowanceData(a, b)).toBe(
          encodeFunctionData({ abi: erc20Abi, functionName: "allowance", args: [a, b] }),
        );
        expect(creditOfData(a, n)).toBe(
          encodeFunctionData({ abi: subscriptionProcessorAbi, functionName: "creditOf", args: [a, n] }),
        );
      }),
    );
  });

  test("getEthBalance (Multicall3) and isOwnerAddress (a spend permission's smart account)", () => {
    fc.assert(
      fc.property(address, (a) => {
        expect(getEthBalanceData(a)).toBe(
          encodeFunctionData({ abi: multicall3Abi, functionName: "getEthBalance", args: [a] }),
        );
        expect(isOwnerAddressData(a)).toBe(
          encodeFunctionData({ abi: testSmartAccountAbi, functionName: "isOwnerAddress", args: [a] }),
        );
      }),
    );
  });

  test("aggregate3 calls, and its results reduced to first words", () => {
    fc.assert(
      fc.property(fc.array(fc.record({ to: address, data: bytes }), { maxLength: 20 }), (calls) => {
        const viem = encodeFunctionData({
          abi: multicall3Abi,
          functionName: "aggregate3",
          args: [calls.map((c) => ({ target: c.to, allowFailure: true, callData: c.data }))],
        });
        expect(aggregate3Data(calls)).toBe(viem);
      }),
    );
    fc.assert(
      fc.property(fc.array(fc.record({ success: fc.boolean(), returnData: bytes }), { maxLength: 20 }), (results) => {
        const data = encodeFunctionResult({ abi: multicall3Abi, functionName: "aggregate3", result: results });
        const decoded = decodeFunctionResult({ abi: multicall3Abi, functionName: "aggregate3", data });
        const expected = decoded.map((r) =>
          r.success && r.returnData.length >= 66 ? BigInt(r.returnData.slice(0, 66)) : undefined,
        );
        expect(aggregate3Words(data)).toEqual(expected);
      }),
    );
  });
});
