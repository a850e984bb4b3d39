/**
 * The dashboard's renewals in a real browser (Debian's Chromium through playwright-core) against the demo of
 * `bun run dev` on a real anvil, indexed and evaluated by the real service: the overview's "Renewals, next 7 days"
 * card shows the stats API's figures per token; the Renewals page lists at risk first, filters by reason, says what
 * each subscriber must do, and downloads the CSV with the credential. The demo holds renewals in every outlook.
 */
import { afterAll, beforeAll, describe, expect, setDefaultTimeout, test } from "bun:test";
import { chromium, type Browser, type Page } from "playwright-core";
import { startAnvil, type Anvil } from "../../src/chain/anvil";
import { installMulticall3 } from "../../src/chain/multicall3";
import { publicClientFor } from "../../src/chain/clients";
import { demoAnvilArgs, seedDemo } from "../../src/cli/dev";
import { loadConfig } from "../../src/common/config";
import { createApiKey } from "../../src/auth/api-keys";
import { renewalAction } from "../../src/dashboard/pages/renewals";
import type { RenewalItem } from "../../src/http/features/renewals/model";
import type { StatsResponse } from "../../src/http/features/stats/model";
import { startService, type Service } from "../../src/service";
import { until } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { freePort } from "../../testkit/cli";

// Real chains and services: slower than bun's default 5 s per test when files run together.
setDefaultTimeout(60_000);

let anvil: Anvil;
let service: Service;
let browser: Browser;
let page: Page;
let merchant: string;
let apiKey: string;
const errors: string[] = [];

async function api<T>(path: string): Promise<T> {
  const res = await fetch(service.url + path, { headers: { authorization: `Bearer ${apiKey}` } });
  expect(res.status, path).toBe(200);
  return (await res.json()) as T;
}

async function go(hash: string): Promise<void> {
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForSelector(`main[data-ready="${hash}"]`, { timeout: 20_000 });
}

beforeAll(async () => {
  anvil = await startAnvil({ args: demoAnvilArgs() });
  await installMulticall3(anvil.rpcUrl);
  const seeded = await seedDemo(anvil.rpcUrl, anvil.chainId);
  const port = await freePort();
  const config = loadConfig({
    SIWE_DOMAIN: `127.0.0.1:${port}`,
    RPC_URL: anvil.rpcUrl,
    CHAIN_ID: String(anvil.chainId),
    PROCESSOR_ADDRESS: seeded.processor,
    START_BLOCK: seeded.startBlock.toString(),
    ROLES: "api,indexer",
    PORT: String(port),
    HOST: "127.0.0.1",
    POLL_INTERVAL_MS: "200",
    LOG_LEVEL: "error",
  });
  service = await startService(config, { db: await createTestDb() });
  const head = await publicClientFor(anvil.rpcUrl).getBlockNumber({ cacheTime: 0 });
  await service.indexer!.waitForBlock(head);
  merchant = seeded.merchant.toLowerCase();
  apiKey = (await createApiKey(service.db.sql, { merchant, label: "browser test" })).key;
  await until("the demo's outlooks at the head", async () => {
    const [row] = await service.db.sql<{ n: number }[]>`
      select count(*)::int as n from renewal_outlooks where checked_block < ${head.toString()}`;
    const all = await api<RenewalItem[]>(`/v0/renewals/${merchant}`);
    return row!.n === 0 && all.length > 0;
  });
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: ["--no-sandbox", "--disable-gpu"] });
  const context = await browser.newContext({ viewport: { width: 1280, height: 900 }, acceptDownloads: true });
  page = await context.newPage();
  page.on("console", (m) => void (m.type() === "error" && errors.push(m.text())));
  page.on("pageerror", (e) => errors.push(e.message));
  await page.goto(`${service.url}/dashboard#key=${apiKey}&merchant=${merchant}`);
  await page.click("[data-confirm-link]", { timeout: 30_000 });
  await page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await anvil?.stop();
}, 30_000);

describe("renewals in the dashboard", () => {
  test("the demo has renewals in every outlook: each reason and will_renew", async () => {
    const all = await api<RenewalItem[]>(`/v0/renewals/${merchant}`);
    const kinds = new Set(all.map((r) => r.reason ?? r.outlook));
    expect([...kinds].sort()).toEqual([
      "AllowanceExpired",
      "InsufficientAllowance",
      "InsufficientBalance",
      "will_renew",
    ]);
  });

  test("overview: 'Renewals, next 7 days' per token, the stats API's figures", async () => {
    await go("#/overview");
    const stats = await api<StatsResponse>(`/v0/stats/${merchant}`);
    expect(stats.renewals.length).toBeGreaterThan(0);
    const card = page.locator("section.card", { hasText: "Renewals, next 7 days" });
    for (const t of stats.renewals) {
      const cells = await card.locator(`tr[data-token="${t.token}"] td`).allTextContents();
      expect(cells.slice(0, 6)).toEqual([
        t.currency!,
        String(t.due.count),
        String(t.at_risk.count),
        String(t.at_risk.by_reason.AllowanceExpired.count),
        String(t.at_risk.by_reason.InsufficientAllowance.count),
        String(t.at_risk.by_reason.InsufficientBalance.count),
      ]);
    }
  });

  test("the Renewals page: at risk first, what each subscriber must do, filter by reason, CSV", async () => {
    await go("#/renewals");
    const risk = await api<RenewalItem[]>(`/v0/renewals/${merchant}?outlook=at_risk`);
    const fine = await api<RenewalItem[]>(`/v0/renewals/${merchant}?outlook=will_renew`);
    const ids = await page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.id));
    expect(ids).toEqual([...risk, ...fine].map((r) => r.on_chain_id));
    for (const r of [...risk, ...fine]) {
      expect(await page.textContent(`tr[data-id="${r.on_chain_id}"] td.action`)).toBe(renewalAction(r));
    }
    const low = risk.find((r) => r.reason === "InsufficientBalance")!;
    expect(renewalAction(low)).toMatch(/^top up [\d.,]+ (USDC|DAI)$/);
    expect(
      renewalAction({
        ...low,
        reason: "InsufficientAllowance",
        shortfall: "5790000",
        token_decimals: 6,
        currency: "USDC",
      }),
    ).toBe("approve 5.79 USDC more");
    expect(renewalAction({ ...low, reason: "AllowanceExpired" })).toBe("extend the allowance expiry");
    await page.selectOption('select[name="reason"]', "AllowanceExpired");
    await page.waitForSelector('main[data-ready="#/renewals?reason=AllowanceExpired"]', { timeout: 20_000 });
    const expired = risk.filter((r) => r.reason === "AllowanceExpired").map((r) => r.on_chain_id);
    expect(
      await page.locator("tbody tr").evaluateAll((rows) => rows.map((r) => (r as HTMLElement).dataset.id)),
    ).toEqual(expired);
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("text=Download CSV")]);
    const text = await (await download.createReadStream()).toArray().then((c) => Buffer.concat(c).toString());
    expect(text.split("\r\n")[0]).toStartWith("allocation_id,on_chain_id,");
    expect(text.trim().split("\r\n").length).toBe(1 + expired.length);
    expect(errors).toEqual([]);
  });
});
