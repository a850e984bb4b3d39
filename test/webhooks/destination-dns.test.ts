/**
 * The destination check after DNS resolution (webhooks.md §4): a name whose answer is an IPv6 form of a private
 * IPv4 address is refused at creation and on every attempt. The resolver is replaced for this file only.
 */
import { describe, expect, mock, test } from "bun:test";

/** What the fake resolver answers, by name. */
const ANSWERS: Record<string, { address: string; family: number }[]> = {
  "mapped.example.com": [{ address: "::ffff:7f00:1", family: 6 }],
  "mapped-dotted.example.com": [{ address: "::ffff:127.0.0.1", family: 6 }],
  "metadata.example.com": [{ address: "::ffff:a9fe:a9fe", family: 6 }],
  "nat64.example.com": [{ address: "64:ff9b::a00:1", family: 6 }],
  "sixtofour.example.com": [{ address: "2002:c0a8:101::1", family: 6 }],
  "mixed.example.com": [
    { address: "2606:4700:4700::1111", family: 6 },
    { address: "::ffff:192.168.0.1", family: 6 },
  ],
  "public.example.com": [{ address: "2606:4700:4700::1111", family: 6 }],
};

// Other names go to the real resolver: Bun's module mocks outlive this file when several files run in one process.
const realLookup = (await import("node:dns/promises")).lookup;
mock.module("node:dns/promises", () => ({
  lookup: async (host: string, opts: { all: true; verbatim: boolean }) => ANSWERS[host] ?? realLookup(host, opts),
}));

const { resolveDestination } = await import("../../src/webhooks/destination");
const { sendAttempt } = await import("../../src/webhooks/send");

describe("names resolving to IPv6 forms of private addresses", () => {
  const refused = Object.keys(ANSWERS).filter((h) => h !== "public.example.com");

  test("are refused by the resolution check (creation)", async () => {
    for (const host of refused) {
      await expect(resolveDestination(`https://${host}/hook`, false), host).rejects.toThrow(/resolves to a private/);
    }
    await resolveDestination("https://public.example.com/hook", false);
  });

  test("the error never echoes the address the name resolved to", async () => {
    for (const host of refused) {
      const err = await resolveDestination(`https://${host}/hook`, false).catch((e: Error) => e);
      expect(err).toBeInstanceOf(Error);
      for (const a of ANSWERS[host]!) expect((err as Error).message, host).not.toContain(a.address);
      const r = await sendAttempt(`https://${host}/hook`, "evt_1", "{}", ["whsec_AAAA"], {
        timeoutMs: 1000,
        allowPrivate: false,
      });
      for (const a of ANSWERS[host]!) expect(r.error ?? "", host).not.toContain(a.address);
    }
  });

  test("and on every attempt, by the send path, before any connection", async () => {
    for (const host of refused) {
      const r = await sendAttempt(`https://${host}/hook`, "evt_1", "{}", ["whsec_AAAA"], {
        timeoutMs: 1000,
        allowPrivate: false,
      });
      expect(r.ok, host).toBe(false);
      expect(r.status).toBeNull();
      expect(r.error ?? "").toContain("resolves to a private address");
    }
  });
});
