import { describe, expect, test } from "bun:test";
import { base58, constantTimeEqual, hashSecret, randomId, randomSecret } from "../../src/auth/hash";

describe("hash helpers", () => {
  test("base58 matches the Bitcoin alphabet, leading zero bytes included", () => {
    expect(base58(new TextEncoder().encode("hello world"))).toBe("StV1DL6CwTryKyV");
    expect(base58(new Uint8Array([0, 0, 1]))).toBe("112");
    expect(base58(new Uint8Array([]))).toBe("");
  });

  test("random secrets carry their prefix and 256 bits of base58", () => {
    const seen = new Set<string>();
    for (let i = 0; i < 200; i++) {
      const s = randomSecret("sk_live_");
      expect(s).toMatch(/^sk_live_[1-9A-HJ-NP-Za-km-z]{40,44}$/);
      seen.add(s);
    }
    expect(seen.size).toBe(200);
    expect(randomId("key_")).toMatch(/^key_[0-9a-f]{20}$/);
  });

  test("hashSecret is SHA-256 hex", () => {
    expect(hashSecret("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });

  test("constantTimeEqual compares strings of any length", () => {
    expect(constantTimeEqual("same-secret", "same-secret")).toBe(true);
    expect(constantTimeEqual("same-secret", "same-secreT")).toBe(false);
    expect(constantTimeEqual("short", "a much longer string")).toBe(false);
    expect(constantTimeEqual("", "")).toBe(true);
  });
});
