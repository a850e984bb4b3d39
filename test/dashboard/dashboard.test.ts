/**
 * The dashboard in a real browser (Debian's Chromium through playwright-core) against a seeded service: the demo of
 * `bun run dev` on a real anvil, indexed by the real indexer, served by the real API. Signs in with an API key (the
 * `#key=` link and the form) and with SIWE through an injected EIP-1193 provider backed by a viem local account;
 * checks that the overview shows the stats API's numbers and chart points, that each status filter shows the API's
 * rows, the CSV download carries the credential, API keys can be created and revoked, no request leaves the origin
 * and nothing is logged as an error. Screenshots at 1280 and 390 px go to /tmp/dashboard-shots (not committed).
 */
import { freePort, until } from "../../testkit/cli";
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { chromium, type Browser, type BrowserContext, type Page } from "playwright-core";
import { privateKeyToAccount } from "viem/accounts";
import { startAnvil, type Anvil } from "../../src/chain/anvil";
import { demoAnvilArgs, seedDemo } from "../../src/cli/dev";
import { loadConfig } from "../../src/common/config";
import { startService, type Service } from "../../src/service";
import { createApiKey } from "../../src/auth/api-keys";
import { publicClientFor } from "../../src/chain/clients";
import { STATUSES } from "../../src/dashboard/types";
import type { StatsResponse } from "../../src/http/features/stats/model";
import { createTestDb } from "../../testkit/db";
import { keys } from "../../testkit/accounts";
import { startReceiver, type Receiver } from "../../testkit/webhooks";
import { Webhook } from "standardwebhooks";

const SHOTS = "/tmp/dashboard-shots";
const CHROMIUM_ARGS = [
  "--no-sandbox",
  "--disable-gpu",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
  "--no-first-run",
];

let anvil: Anvil;
let service: Service;
let browser: Browser;
let origin: string;
let merchant: string;
let apiKey: string;
/** Every request any page made, and every console error or page error. */
const requests: string[] = [];
const errors: string[] = [];

beforeAll(async () => {
  anvil = await startAnvil({ args: demoAnvilArgs() });
  const seeded = await seedDemo(anvil.rpcUrl, anvil.chainId);
  // The wallet sign-in names the page's host, so SIWE_DOMAIN must be the listener's own host:port.
  const port = await freePort();
  const config = loadConfig({
    SIWE_DOMAIN: `127.0.0.1:${port}`,
    RPC_URL: anvil.rpcUrl,
    CHAIN_ID: String(anvil.chainId),
    PROCESSOR_ADDRESS: seeded.processor,
    START_BLOCK: seeded.startBlock.toString(),
    ROLES: "api,indexer,webhooks",
    WEBHOOK_ALLOW_PRIVATE_URLS: "1",
    WEBHOOK_POLL_INTERVAL_MS: "100",
    PORT: String(port),
    HOST: "127.0.0.1",
    POLL_INTERVAL_MS: "200",
    LOG_LEVEL: "error",
  });
  service = await startService(config, { db: await createTestDb() });
  await service.indexer!.waitForBlock(await publicClientFor(anvil.rpcUrl).getBlockNumber({ cacheTime: 0 }));
  merchant = seeded.merchant.toLowerCase();
  apiKey = (await createApiKey(service.db.sql, { merchant, label: "browser test" })).key;
  origin = service.url!;
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: CHROMIUM_ARGS });
  mkdirSync(SHOTS, { recursive: true });
}, 60_000);

afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await anvil?.stop();
}, 30_000);

async function newPage(width = 1280): Promise<{ context: BrowserContext; page: Page }> {
  const context = await browser.newContext({
    viewport: { width, height: width < 500 ? 844 : 900 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  page.on("request", (r) => requests.push(r.url()));
  page.on("console", (m) => {
    if (m.type() === "error") errors.push(m.text());
  });
  page.on("pageerror", (e) => errors.push(e.message));
  return { context, page };
}

/** Moves to a hash route and waits until the page has drawn it. */
async function go(page: Page, hash: string): Promise<void> {
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForSelector(`main[data-ready="${hash}"]`, { timeout: 20_000 });
}

async function api<T>(path: string, token = apiKey): Promise<T> {
  const res = await fetch(origin + path, { headers: { authorization: `Bearer ${token}` } });
  expect(res.status, path).toBe(200);
  return (await res.json()) as T;
}

/** The overview's figures against the stats API's, for one interval. */
async function checkOverview(page: Page, interval: "day" | "week" | "month"): Promise<StatsResponse> {
  await go(page, `#/overview?interval=${interval}`);
  const stats = await api<StatsResponse>(`/v0/stats/${merchant}?interval=${interval}`);
  for (const s of STATUSES) {
    expect(await page.textContent(`[data-status="${s}"]`), s).toBe(String(stats.subscriptions.by_status[s]));
  }
  const tokens = [...new Set(stats.revenue.map((r) => r.currency!))];
  expect(await page.locator(".token-block").count()).toBe(tokens.length);
  for (const currency of tokens) {
    const rows = stats.revenue.filter((r) => r.currency === currency);
    const sum = (f: "gross" | "fees" | "net") => rows.reduce((n, r) => n + BigInt(r[f]), 0n).toString();
    const block = page.locator(`.token-block[data-token="${currency}"]`);
    for (const f of ["gross", "fees", "net"] as const) {
      expect(await block.locator(`[data-kpi="${f}"]`).getAttribute("data-value"), `${currency} ${f}`).toBe(sum(f));
    }
    expect(await block.locator(`[data-kpi="charges"]`).getAttribute("data-value")).toBe(
      String(rows.reduce((n, r) => n + r.charges, 0)),
    );
    // The chart's points: one per period, the API's gross and net (0 where the period had no charge).
    const chart = JSON.parse((await block.locator(".chart").getAttribute("data-chart"))!);
    const at = new Map(rows.map((r) => [r.period_start, r]));
    expect(chart.periods).toEqual(stats.periods);
    expect(chart.gross).toEqual(stats.periods.map((p) => at.get(p)?.gross ?? "0"));
    expect(chart.net).toEqual(stats.periods.map((p) => at.get(p)?.net ?? "0"));
    expect(await block.locator(".chart canvas").count()).toBeGreaterThan(0);
  }
  for (const r of stats.run_rate) {
    expect(await page.getAttribute(`[data-run-rate="${r.currency}"] .kpi-value`, "data-value")).toBe(r.amount_per_30d);
  }
  const reasons = new Map<string, number>();
  for (const f of stats.failures) reasons.set(f.reason, (reasons.get(f.reason) ?? 0) + f.count);
  for (const [reason, n] of reasons) expect(await page.textContent(`[data-reason="${reason}"]`)).toBe(String(n));
  return stats;
}

describe("signed in with an API key", () => {
  let context: BrowserContext;
  let page: Page;

  beforeAll(async () => {
    ({ context, page } = await newPage());
  });
  afterAll(async () => {
    await context?.close();
  });

  test("a #key= link signs in only once the person confirms the merchant it shows; cancel stores nothing", async () => {
    const link = await newPage();
    await link.page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${merchant.toUpperCase().replace("0X", "0x")}`);
    await link.page.waitForSelector("[data-link-confirm]", { timeout: 30_000 });
    // The key is out of the address bar and stored nowhere yet; the page shows the merchant it reads, in full.
    expect(link.page.url()).toBe(`${origin}/dashboard`);
    expect(await link.page.evaluate(() => sessionStorage.getItem("dashboard.credential"))).toBeNull();
    expect(await link.page.textContent("[data-link-merchant]")).toBe(merchant);
    expect(await link.page.locator("main[data-ready]").count()).toBe(0);
    await link.page.click("text=No, cancel");
    await link.page.waitForSelector("form input[name=key]");
    expect(await link.page.evaluate(() => sessionStorage.getItem("dashboard.credential"))).toBeNull();
    // A link whose key does not read the merchant it names is refused before anything is shown.
    const other = "0x" + "7".repeat(40);
    const logged = errors.length;
    await link.page.goto("about:blank"); // a fresh load: from /dashboard a new fragment only changes the hash
    await link.page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${other}`);
    await link.page.waitForSelector(".notice", { timeout: 30_000 });
    expect(await link.page.textContent(".notice")).toContain("did not work");
    expect(await link.page.locator("[data-link-confirm]").count()).toBe(0);
    expect(await link.page.evaluate(() => sessionStorage.getItem("dashboard.credential"))).toBeNull();
    // The browser logs the refused read (403) as a failed resource: expected here, and only that.
    expect(errors.slice(logged).every((e) => e.includes("403"))).toBe(true);
    errors.splice(logged);
    await link.context.close();
  }, 60_000);

  test("the #key= link signs in after the confirmation, keeps the key in sessionStorage and removes it from the address bar", async () => {
    await page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${merchant}`);
    await page.click("[data-confirm-link]", { timeout: 30_000 });
    await page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
    expect(page.url()).toBe(`${origin}/dashboard`);
    const stored = JSON.parse((await page.evaluate(() => sessionStorage.getItem("dashboard.credential")))!);
    expect(stored).toEqual({ kind: "key", token: apiKey, merchant });
    // Only wallet sessions manage keys.
    expect(await page.locator('nav a[href="#/keys"]').count()).toBe(0);
    expect(await page.locator(".badge[data-state=ok]").count()).toBe(1);
    expect(await page.getAttribute(".badge", "data-block")).toMatch(/^\d+$/);
  }, 60_000);

  test("the overview shows the stats API's numbers and chart points (day, week, month)", async () => {
    await checkOverview(page, "day");
    const week = await checkOverview(page, "week");
    expect(week.revenue.length).toBeGreaterThan(1);
    expect(week.failures.length).toBeGreaterThan(1);
    await page.screenshot({ path: `${SHOTS}/overview-1280.png`, fullPage: true });
    await checkOverview(page, "month");
  }, 60_000);

  test("filtering subscriptions by each status shows the API's rows; wallet search and the detail view", async () => {
    for (const status of STATUSES) {
      await go(page, `#/subscriptions?status=${status}`);
      const ids = await page.$$eval("tr[data-id]", (rows) => rows.map((r) => (r as HTMLElement).dataset.id));
      const rows = await api<{ on_chain_id: string; status: string }[]>(
        `/v0/subscriptions/${merchant}?status=${status}&limit=25`,
      );
      expect(rows.length, status).toBeGreaterThan(0);
      expect(ids, status).toEqual(rows.map((r) => r.on_chain_id));
    }
    await go(page, "#/subscriptions");
    const all = await api<{ on_chain_id: string; user_address: string; allocation_id: string }[]>(
      `/v0/subscriptions/${merchant}?limit=25`,
    );
    const wallet = all[3]!.user_address;
    await page.fill('input[type="search"]', wallet.slice(2, 12));
    const visible = await page.$$eval("tr[data-id]:not([hidden])", (rows) =>
      rows.map((r) => (r as HTMLElement).dataset.wallet),
    );
    expect(visible.length).toBeGreaterThan(0);
    expect(visible.every((w) => w === wallet)).toBe(true);
    expect(visible.length).toBe(all.filter((s) => s.user_address === wallet).length);
    await page.fill('input[type="search"]', "");

    await page.click(`tr[data-id="${all[0]!.on_chain_id}"] a`);
    await page.waitForSelector(`main[data-ready="#/subscriptions/${all[0]!.on_chain_id}"]`);
    const activity = await api<{ allocation_id: string }[]>(`/v0/activity/${merchant}`);
    const mine = activity.filter((a) => a.allocation_id === all[0]!.allocation_id);
    expect(mine.length).toBeGreaterThan(0);
    expect(await page.locator(".card:nth-of-type(2) tbody tr").count()).toBe(mine.length);
  }, 60_000);

  test("the CSV download is fetched with the credential and saves what the API answers", async () => {
    await go(page, "#/subscriptions?status=ACTIVE");
    const seen = page.waitForRequest((r) => r.url().includes("format=csv"));
    const download = page.waitForEvent("download");
    await page.click("text=Download CSV");
    const req = await seen;
    expect(req.url()).toBe(`${origin}/v0/subscriptions/${merchant}?status=ACTIVE&format=csv`);
    expect(req.headers().authorization).toBe(`Bearer ${apiKey}`);
    const file = await download;
    expect(file.suggestedFilename()).toBe("subscriptions.csv");
    const saved = readFileSync((await file.path())!, "utf8");
    const direct = await (await fetch(req.url(), { headers: { authorization: `Bearer ${apiKey}` } })).text();
    expect(saved).toBe(direct);
  }, 60_000);

  test("activity filters show the API's rows", async () => {
    await go(page, "#/activity?type=FAIL");
    const types = await page.$$eval("tr[data-type]", (rows) => rows.map((r) => (r as HTMLElement).dataset.type));
    const fails = await api<unknown[]>(`/v0/activity/${merchant}?type=FAIL&limit=50`);
    expect(types.length).toBe(fails.length);
    expect(new Set(types)).toEqual(new Set(["FAIL"]));
    await go(page, "#/activity?token=DAI");
    const dai = await api<unknown[]>(`/v0/activity/${merchant}?token=DAI&limit=50`);
    expect(await page.locator("tr[data-type]").count()).toBe(dai.length);
  }, 60_000);

  test("at 390 px wide: readable, tables scroll inside their card", async () => {
    const small = await newPage(390);
    await small.page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${merchant}`);
    await small.page.click("[data-confirm-link]", { timeout: 30_000 });
    await small.page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
    await small.page.screenshot({ path: `${SHOTS}/overview-390.png`, fullPage: true });
    await go(small.page, "#/subscriptions");
    const overflow = await small.page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
    expect(overflow).toBeLessThanOrEqual(0);
    const wrap = await small.page.$eval(".table-wrap", (el) => el.scrollWidth > el.clientWidth);
    expect(wrap).toBe(true);
    await small.page.screenshot({ path: `${SHOTS}/subscriptions-390.png`, fullPage: true });
    await go(page, "#/subscriptions");
    await page.screenshot({ path: `${SHOTS}/subscriptions-1280.png`, fullPage: true });
    await small.context.close();
  }, 60_000);

  test("webhooks: create (secret shown once), send a test that verifies, redeliver, rotate, disable, delete", async () => {
    const receiver: Receiver = startReceiver();
    page.on("dialog", (d) => void d.accept());
    try {
      await go(page, "#/webhooks");
      await page.fill('input[name="url"]', receiver.url);
      await page.fill('input[name="event_types"]', "charge.succeeded, subscription.status_changed");
      await page.fill('input[name="description"]', "browser test");
      await page.click("text=Add endpoint");
      const secret = (await page.waitForSelector("[data-secret]")).textContent();
      const listed = await api<{ id: string; url: string; event_types: string[] }[]>(
        `/v0/webhook_endpoints/${merchant}`,
      );
      expect(listed).toHaveLength(1);
      const ep = listed[0]!;
      expect(ep).toMatchObject({ url: receiver.url, event_types: ["charge.succeeded", "subscription.status_changed"] });
      const row = page.locator(`tr[data-endpoint-id="${ep.id}"]`);
      await row.locator("text=Send test").click();
      await page.waitForSelector("text=Test delivery succeeded (HTTP 200)");
      expect(receiver.received).toHaveLength(1);
      const wh = new Webhook((await secret)!);
      expect((wh.verify(receiver.received[0]!.body, receiver.received[0]!.headers) as { type: string }).type).toBe(
        "webhook.test",
      );
      await page.screenshot({ path: `${SHOTS}/webhooks-1280.png`, fullPage: true });

      // The delivery log shows the API's rows; redeliver sends the same event again through the dispatcher.
      await go(page, `#/webhooks/${ep.id}`);
      const log = await api<{ id: string }[]>(`/v0/webhook_endpoints/${merchant}/${ep.id}/deliveries`);
      const shown = await page.$$eval("tr[data-delivery-id]", (rows) =>
        rows.map((r) => (r as HTMLElement).dataset.deliveryId),
      );
      expect(shown).toEqual(log.map((d) => d.id));
      await page.locator("tr[data-delivery-id] >> text=Redeliver").first().click();
      await page.waitForSelector("text=queued");
      await until("the redelivery to arrive", async () => receiver.received.length >= 2);
      expect(receiver.received.map((r) => r.id)).toEqual([receiver.received[0]!.id, receiver.received[0]!.id]);

      await go(page, "#/webhooks");
      await page.locator(`tr[data-endpoint-id="${ep.id}"] >> text=Rotate secret`).click();
      const rotated = await (
        await page.waitForSelector("text=New signing secret")
      ).evaluate((el) => el.closest(".notice")!.querySelector("[data-secret]")!.textContent);
      expect(rotated).toMatch(/^whsec_/);
      expect(rotated).not.toBe(await secret);
      await page.locator(`tr[data-endpoint-id="${ep.id}"] >> button:text-is("Disable")`).click();
      // The button's exact label: a bare `text=Enable` also matches the row's "Enabled" pill, before the PATCH is done.
      await page.waitForSelector(`tr[data-endpoint-id="${ep.id}"] >> button:text-is("Enable")`);
      expect((await api<{ enabled: boolean }>(`/v0/webhook_endpoints/${merchant}/${ep.id}`)).enabled).toBe(false);
      await page.locator(`tr[data-endpoint-id="${ep.id}"] >> text=Delete`).click();
      await page.waitForSelector("text=No endpoints yet.");
      expect(await api<unknown[]>(`/v0/webhook_endpoints/${merchant}`)).toEqual([]);
    } finally {
      page.removeAllListeners("dialog");
      await receiver.stop();
    }
  }, 60_000);

  test("sign out returns to the sign-in form; the form signs in again with the key", async () => {
    await page.click("text=Sign out");
    await page.waitForSelector("form.stack");
    expect(await page.evaluate(() => sessionStorage.getItem("dashboard.credential"))).toBeNull();
    // The form is drawn once: nothing redraws it (emptying what was typed) once the page's hash is gone.
    await page.evaluate(() => ((document.querySelector("form.stack") as unknown as { first: boolean }).first = true));
    await page.evaluate(() => new Promise((resolve) => setTimeout(resolve, 300)));
    expect(
      await page.evaluate(() => (document.querySelector("form.stack") as unknown as { first?: boolean }).first),
    ).toBe(true);
    expect(await page.textContent("main")).toContain("You are signed out.");
    expect(new URL(page.url()).hash).toBe("");
    await page.fill('input[name="merchant"]', merchant);
    await page.fill('input[name="key"]', apiKey);
    await page.click("text=Sign in with API key");
    await page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
  }, 60_000);
});

describe("signed in with a wallet (SIWE through window.ethereum)", () => {
  test("signs in, creates a key (shown once), lists and revokes it", async () => {
    const { context, page } = await newPage();
    const account = privateKeyToAccount(keys.merchant);
    expect(account.address.toLowerCase()).toBe(merchant);
    await page.exposeFunction("__walletSign", (message: string) => account.signMessage({ message }));
    await page.addInitScript(
      ({ address, chainId }) => {
        const w = window as unknown as { ethereum: unknown; __walletSign: (m: string) => Promise<string> };
        w.ethereum = {
          request: async ({ method, params }: { method: string; params?: unknown[] }) => {
            if (method === "eth_requestAccounts" || method === "eth_accounts") return [address];
            if (method === "eth_chainId") return `0x${chainId.toString(16)}`;
            if (method === "personal_sign") return w.__walletSign(params![0] as string);
            throw new Error(`unsupported ${method}`);
          },
        };
      },
      { address: account.address, chainId: anvil.chainId },
    );
    page.on("dialog", (d) => void d.accept());
    await page.goto(`${origin}/dashboard`);
    await page.click("text=Sign in with Ethereum");
    await page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
    const stored = JSON.parse((await page.evaluate(() => sessionStorage.getItem("dashboard.credential")))!);
    expect(stored.kind).toBe("session");
    expect(stored.token).toMatch(/^sess_/);
    expect(stored.merchant).toBe(merchant);

    await go(page, "#/keys");
    await page.fill('input[name="label"]', "from the browser");
    await page.click("text=Create key");
    await page.waitForSelector("[data-secret]");
    const secret = (await page.textContent("[data-secret]"))!;
    expect(secret).toMatch(/^sk_live_/);
    expect(await api<unknown[]>(`/v0/subscriptions/${merchant}?limit=1`, secret)).toHaveLength(1);
    const listed = await api<{ id: string; label: string; revoked_at: string | null }[]>(
      `/v0/api_keys/${merchant}`,
      stored.token,
    );
    const created = listed.find((k) => k.label === "from the browser")!;
    expect(await page.locator(`tr[data-key-id="${created.id}"]`).count()).toBe(1);
    await page.click(`tr[data-key-id="${created.id}"] button`);
    await page.waitForSelector(`tr[data-key-id="${created.id}"] .pill`);
    expect(await page.locator("[data-secret]").count()).toBe(0);
    const res = await fetch(`${origin}/v0/subscriptions/${merchant}`, {
      headers: { authorization: `Bearer ${secret}` },
    });
    expect(res.status).toBe(401);

    await page.click("text=Sign out");
    await page.waitForSelector("form.stack");
    const after = await fetch(`${origin}/v0/api_keys/${merchant}`, {
      headers: { authorization: `Bearer ${stored.token}` },
    });
    expect(after.status).toBe(401);
    await context.close();
  }, 60_000);
});

describe("the block badge while the index backfills", () => {
  test("reads 'Syncing 42 % · ETA 4 min' from /readyz's progress and eta_s (a 503 while behind)", async () => {
    const sql = service.db.sql;
    await service.indexer!.stop(); // it would move the row back to the chain's real state
    const [saved] = await sql`select * from chains where chain_id = ${anvil.chainId}`;
    // Its own context: the 503 of /readyz is the one console error expected here.
    const context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    const consoleErrors: string[] = [];
    try {
      // 4,200 of 10,000 blocks, 20 blocks/s: 290 s left.
      await sql`update chains set start_block = 1000, indexed_block = 5199, head_block = 10999, head_seen_at = now(),
        sync_blocks_per_s = 20, updated_at = now() where chain_id = ${anvil.chainId}`;
      const page = await context.newPage();
      page.on("request", (r) => requests.push(r.url()));
      page.on("console", (m) => void (m.type() === "error" && consoleErrors.push(m.text())));
      page.on("pageerror", (e) => errors.push(e.message));
      await page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${merchant}`);
      await page.click("[data-confirm-link]", { timeout: 30_000 });
      await page.waitForSelector(".badge[data-state=syncing]", { timeout: 30_000 });
      expect(await page.textContent(".badge")).toBe("Syncing 42 % · ETA 4 min");
      await page.screenshot({ path: `${SHOTS}/badge-syncing.png`, clip: { x: 0, y: 0, width: 1280, height: 80 } });
      // Caught up again: the block number and freshness come back.
      await sql`update chains set indexed_block = 10999, sync_blocks_per_s = null where chain_id = ${anvil.chainId}`;
      await page.waitForSelector(".badge[data-state=ok]", { timeout: 30_000 });
      expect(await page.textContent(".badge")).toMatch(/^Block 10,999 · \d+ s ago$/);
      expect(consoleErrors.every((e) => e.includes("503"))).toBe(true);
    } finally {
      await context.close();
      await sql`delete from chains where chain_id = ${anvil.chainId}`;
      await sql`insert into chains ${sql(saved!)}`;
      await service.indexer!.start();
    }
  }, 60_000);
});

describe("over every page above", () => {
  test("no request left the origin and nothing was logged as an error", () => {
    expect(requests.length).toBeGreaterThan(20);
    const foreign = requests.filter(
      (u) => !u.startsWith(`${origin}/`) && !u.startsWith("data:") && !u.startsWith("blob:"),
    );
    expect(foreign).toEqual([]);
    expect(errors).toEqual([]);
  });
});
