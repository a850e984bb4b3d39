/** Fee arithmetic of sends and replacements: the 12.5 % bump, the network's suggestion, and the cap. */
import { expect, test } from "bun:test";
import { bump, capFees, replacementFees } from "../../src/keeper/fees";

const gwei = (n: number) => BigInt(Math.round(n * 1e9));

test("bump raises by at least 12.5 %, rounding up, and by at least 1 wei", () => {
  expect(bump(1000n)).toBe(1125n);
  expect(bump(1001n)).toBe(1127n);
  expect(bump(0n)).toBe(1n);
  expect(bump(7n)).toBe(8n);
});

test("a replacement takes the larger of the bump and the network's current fees, each field", () => {
  const sent = { maxFeePerGas: gwei(10), maxPriorityFeePerGas: gwei(1) };
  expect(replacementFees(sent, { maxFeePerGas: gwei(5), maxPriorityFeePerGas: gwei(0.5) }, undefined)).toEqual({
    maxFeePerGas: gwei(11.25),
    maxPriorityFeePerGas: gwei(1.125),
  });
  expect(replacementFees(sent, { maxFeePerGas: gwei(20), maxPriorityFeePerGas: gwei(2) }, undefined)).toEqual({
    maxFeePerGas: gwei(20),
    maxPriorityFeePerGas: gwei(2),
  });
  expect(replacementFees({ gasPrice: gwei(8) }, { gasPrice: gwei(1) }, undefined)).toEqual({ gasPrice: gwei(9) });
});

test("the cap is never exceeded: a replacement within it is capped, one that cannot be valid is refused", () => {
  const sent = { maxFeePerGas: gwei(10), maxPriorityFeePerGas: gwei(1) };
  const busy = { maxFeePerGas: gwei(30), maxPriorityFeePerGas: gwei(3) };
  expect(replacementFees(sent, busy, gwei(12))).toEqual({ maxFeePerGas: gwei(12), maxPriorityFeePerGas: gwei(3) });
  expect(replacementFees(sent, busy, gwei(11))).toBeNull();
  expect(replacementFees({ gasPrice: gwei(8) }, { gasPrice: gwei(20) }, gwei(9.5))).toEqual({ gasPrice: gwei(9.5) });
  expect(replacementFees({ gasPrice: gwei(8) }, { gasPrice: gwei(20) }, gwei(8.5))).toBeNull();
});

test("a first send is capped, and refused when the base fee or the gas price is above the cap", () => {
  const fees = { maxFeePerGas: gwei(50), maxPriorityFeePerGas: gwei(2) };
  expect(capFees(fees, undefined, gwei(100))).toEqual(fees);
  expect(capFees(fees, gwei(30), gwei(20))).toEqual({ maxFeePerGas: gwei(30), maxPriorityFeePerGas: gwei(2) });
  expect(capFees(fees, gwei(1), gwei(0.5))).toEqual({ maxFeePerGas: gwei(1), maxPriorityFeePerGas: gwei(1) });
  expect(capFees(fees, gwei(30), gwei(31))).toBeNull();
  expect(capFees({ gasPrice: gwei(40) }, gwei(30), null)).toBeNull();
});
