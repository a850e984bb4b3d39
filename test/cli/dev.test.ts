/**
 * `bun run dev` end to end: spawn it, wait for the banner, read the demo through HTTP with the printed key and
 * curl lines, then Ctrl-C and check that everything it started is gone.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, portOpen, spawnBun, until, type Child } from "../../testkit/cli";

let dataDir: string;
let child: Child | undefined;

beforeAll(() => {
  dataDir = mkdtempSync(join(tmpdir(), "dev-test-"));
}, 60_000);

afterAll(async () => {
  child?.proc.kill("SIGKILL");
  await child?.exited;
  rmSync(dataDir, { recursive: true, force: true });
}, 60_000);

type Sub = {
  status: string;
  allocation_id: string;
  times_executed: number;
  source?: string;
  spend_permission?: { revoked_by: string | null; spent_in_period: string | null; paid_through: string | null };
};
type Activity = {
  type: string;
  reason: string | null;
  currency: string | null;
  allocation_id: string;
  tx_hash: string;
  keeper_address: string | null;
};

/** Runs one printed `curl` line through fetch: its URL and its Authorization header. */
async function runCurl(line: string): Promise<Response> {
  const url = line.match(/"?(http:\/\/[^\s"]+)"?\s*$/)![1]!;
  const auth = line.match(/-H "Authorization: ([^"]+)"/)?.[1];
  return fetch(url, { headers: auth ? { authorization: auth } : {} });
}

test("bun run dev seeds every status, activity type and failure reason, and Ctrl-C stops it all", async () => {
  const apiPort = await freePort();
  const anvilPort = await freePort();
  child = spawnBun(["src/cli/dev.ts", "--anvil-port", String(anvilPort)], {
    PORT: String(apiPort),
    DEV_DATA_DIR: dataDir,
  });
  const [, key] = await child.waitFor(/^API key: (\S+)$/m, 90_000);
  const out = child.output();
  const api = out.match(/^API: (\S+)$/m)![1]!;
  const merchant = out.match(/^Merchant: (0x[0-9a-f]{40})$/m)![1]!;
  expect(api).toBe(`http://127.0.0.1:${apiPort}`);
  expect(out).toMatch(new RegExp(`^Docs: ${api}/docs$`, "m"));
  expect(await portOpen(anvilPort)).toBe(true);

  const headers = { authorization: `Bearer ${key}` };
  const subs = (await (await fetch(`${api}/v0/subscriptions/${merchant}`, { headers })).json()) as Sub[];
  expect(subs.length).toBeGreaterThanOrEqual(20);
  expect(new Set(subs.map((s) => s.status))).toEqual(
    new Set(["ACTIVE", "PENDING", "PAUSED", "CANCELLED", "EXPIRED", "BLOCKED"]),
  );

  const activity = (await (await fetch(`${api}/v0/activity/${merchant}`, { headers })).json()) as Activity[];
  expect(new Set(activity.map((a) => a.type))).toEqual(new Set(["CHARGE", "FAIL", "REFILL"]));
  expect(new Set(activity.filter((a) => a.type === "FAIL").map((a) => a.reason))).toEqual(
    new Set(["InsufficientAllowance", "InsufficientBalance", "TransferFailed", "AllowanceExpired"]),
  );
  expect(new Set(activity.map((a) => a.currency))).toEqual(new Set(["USDC", "DAI", "BUSD"]));

  // At least 120 days of history before now: sign-ups in most weeks, more in the later half, charges from the first
  // weeks on, and the failures, cancellations and the block spread over the months.
  const now = Date.now();
  const since = new Date(now - 126 * 86_400_000).toISOString();
  const weekly = (await (
    await fetch(`${api}/v0/stats/${merchant}?interval=week&since=${since}`, { headers })
  ).json()) as {
    periods: string[];
    revenue: { period_start: string }[];
    failures: { period_start: string }[];
    subscriptions: { periods: { period_start: string; created: number; cancelled: number }[] };
  };
  const created = weekly.subscriptions.periods.map((p) => p.created);
  expect(created.filter((n) => n > 0).length).toBeGreaterThanOrEqual(12);
  const half = Math.floor(created.length / 2);
  const sum = (xs: number[]) => xs.reduce((a, b) => a + b, 0);
  expect(sum(created.slice(half))).toBeGreaterThan(sum(created.slice(0, half)));
  const daily = (await (
    await fetch(`${api}/v0/stats/${merchant}?interval=day&since=${since}`, { headers })
  ).json()) as { revenue: { period_start: string }[] };
  const firstCharge = Math.min(...daily.revenue.map((r) => Date.parse(r.period_start)));
  expect(now - firstCharge).toBeGreaterThan(120 * 86_400_000);
  const olderThan = (iso: string, days: number) => now - Date.parse(iso) > days * 86_400_000;
  expect(weekly.failures.some((f) => olderThan(f.period_start, 35))).toBe(true);
  expect(weekly.subscriptions.periods.some((p) => p.cancelled > 0 && olderThan(p.period_start, 35))).toBe(true);

  // The three copy-paste lines answer with data.
  const curls = out.split("\n").filter((l) => l.startsWith("curl "));
  expect(curls).toHaveLength(5);
  const [subsRes, activityRes, checkRes, eventsRes, mrrRes] = await Promise.all(curls.map(runCurl));
  expect(mrrRes!.status).toBe(200);
  const mrr = (await mrrRes!.json()) as { tokens: { currency: string; mrr: string; periods: unknown[] }[] };
  expect(mrr.tokens.map((t) => t.currency).sort()).toEqual(["DAI", "USDC"]);
  expect(mrr.tokens.every((t) => BigInt(t.mrr) > 0n)).toBe(true);
  expect(eventsRes!.status).toBe(200);
  expect(((await eventsRes!.json()) as unknown[]).length).toBe(5);
  expect(subsRes!.status).toBe(200);
  expect(((await subsRes!.json()) as Sub[]).length).toBe(subs.length);
  expect(activityRes!.status).toBe(200);
  expect(((await activityRes!.json()) as Activity[]).length).toBeGreaterThan(0);
  expect(checkRes!.status).toBe(200);
  expect(((await checkRes!.json()) as { authorized: boolean }).authorized).toBe(true);

  // Base Spend Permissions beside the modules: one charged for this month by the keeper (the seed leaves its second
  // month due, and the service's keeper holds the merchant's spender key), one lapsed, one revoked by its account.
  const permissions = await until(
    "the keeper to charge the demo's monthly permission",
    async () => {
      const all = (await (
        await fetch(`${api}/v0/subscriptions/${merchant}?source=spend_permission`, { headers })
      ).json()) as Sub[];
      return all[0]?.times_executed === 1 ? all : undefined;
    },
    30_000,
  );
  expect(permissions.map((s) => s.status)).toEqual(["ACTIVE", "EXPIRED", "CANCELLED"]);
  expect(permissions[0]!.spend_permission!.spent_in_period).toBe("9990000");
  expect(permissions[1]!.times_executed).toBe(1);
  expect(permissions[2]!.spend_permission!.revoked_by).toBe("subscriber");
  const spent = (
    (await (await fetch(`${api}/v0/activity/${merchant}?limit=500`, { headers })).json()) as Activity[]
  ).filter((a) => a.allocation_id === permissions[0]!.allocation_id);
  expect(spent.map((a) => [a.type, a.keeper_address])).toEqual([["CHARGE", merchant]]);
  // Sent with the merchant's key after the seed's last step (the third permission's revocation): by the service.
  const rpc = async <T>(method: string, params: unknown[]) =>
    (
      (await (
        await fetch(`http://127.0.0.1:${anvilPort}`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
        })
      ).json()) as { result: T }
    ).result;
  const tx = await rpc<{ from: string; blockNumber: string }>("eth_getTransactionByHash", [spent[0]!.tx_hash]);
  expect(tx.from).toBe(merchant);
  const [, manager, revokedHash] = permissions[2]!.allocation_id.split(":");
  const [revoked] = await rpc<{ blockNumber: string }[]>("eth_getLogs", [
    {
      address: manager,
      topics: ["0xff59e520513907d7deffc74c82b5492b06b2988d7d03dacfd4995de47fe94c95", revokedHash],
      fromBlock: "0x0",
      toBlock: "latest",
    },
  ]);
  expect(BigInt(tx.blockNumber)).toBeGreaterThan(BigInt(revoked!.blockNumber));

  // The live subscription reaches the demo receiver as signed, verified deliveries; the endpoint is the API's.
  const [, endpointId] = out.match(
    /^Webhooks: endpoint (we_[0-9a-f]+) → demo receiver http:\/\/127\.0\.0\.1:\d+\/webhooks/m,
  )!;
  await child.waitFor(
    /^webhook ← charge\.succeeded evt_[0-9a-f]{60} \(signature ok\): subscription \d+, 9\.99 USDC$/m,
    30_000,
  );
  await child.waitFor(
    /^webhook ← subscription\.status_changed evt_[0-9a-f]{40} \(signature ok\): subscription \d+, PENDING → ACTIVE$/m,
    30_000,
  );
  expect(child.output()).not.toContain("SIGNATURE INVALID");
  const endpoints = (await (await fetch(`${api}/v0/webhook_endpoints/${merchant}`, { headers })).json()) as {
    id: string;
  }[];
  expect(endpoints.map((e) => e.id)).toEqual([endpointId!]);
  const deliveries = (await (
    await fetch(`${api}/v0/webhook_endpoints/${merchant}/${endpointId}/deliveries`, { headers })
  ).json()) as { status: string; event_type: string }[];
  expect(deliveries.length).toBeGreaterThanOrEqual(3);
  expect(deliveries.every((d) => d.status === "succeeded")).toBe(true);

  child.proc.kill("SIGINT");
  expect(await child.exited).toBe(0);
  expect(await portOpen(anvilPort)).toBe(false);
  expect(await portOpen(apiPort)).toBe(false);
}, 120_000);

test("bun run dev --chains 2: two anvils, the demo on both, one process answering each chain_id", async () => {
  const apiPort = await freePort();
  const anvilPort = await freePort();
  const dir = mkdtempSync(join(tmpdir(), "dev-chains-"));
  const two = spawnBun(["src/cli/dev.ts", "--chains", "2", "--anvil-port", String(anvilPort)], {
    PORT: String(apiPort),
    DEV_DATA_DIR: dir,
  });
  try {
    const [, key] = await two.waitFor(/^API key: (\S+)$/m, 90_000);
    const out = two.output();
    expect(out).toMatch(
      /anvil http:\/\/127\.0\.0\.1:\d+ \(chain 31337\), anvil http:\/\/127\.0\.0\.1:\d+ \(chain 31338\)/,
    );
    const merchant = out.match(/^Merchant: (0x[0-9a-f]{40})$/m)![1]!;
    const api = `http://127.0.0.1:${apiPort}`;
    const headers = { authorization: `Bearer ${key}` };
    const ids = async (chainId: number) =>
      (
        (await (await fetch(`${api}/v0/subscriptions/${merchant}?chain_id=${chainId}`, { headers })).json()) as Sub[]
      ).map((s) => s.allocation_id);
    const [a, b] = [await ids(31337), await ids(31338)];
    expect(a.length).toBeGreaterThanOrEqual(20);
    expect(b.length).toBeGreaterThanOrEqual(20);
    expect(a.every((id) => id.startsWith("31337:"))).toBe(true);
    expect(b.every((id) => id.startsWith("31338:"))).toBe(true);
    const ready = (await (await fetch(`${api}/readyz`)).json()) as { chains: { chain_id: number }[] };
    expect(ready.chains.map((c) => c.chain_id).sort()).toEqual([31337, 31338]);
    two.proc.kill("SIGINT");
    expect(await two.exited).toBe(0);
    expect(await portOpen(anvilPort)).toBe(false);
  } finally {
    two.proc.kill("SIGKILL");
    await two.exited;
    rmSync(dir, { recursive: true, force: true });
  }
}, 120_000);
