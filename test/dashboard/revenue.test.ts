/**
 * The Revenue page and the overview's revenue bars in a real browser (Debian's Chromium through playwright-core),
 * at 1280 and 390 px, against the demo of `bun run dev` (its months of history) on a real anvil, indexed by the real
 * indexer and served by the real API: every figure, chart point and heatmap cell equals the MRR and cohorts API's,
 * every chart has a shape, and nothing is logged as an error. Screenshots go to DASHBOARD_SHOTS (default
 * /tmp/dashboard-shots; the docs' images are made with DASHBOARD_SHOTS=docs).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, readFileSync } from "node:fs";
import { chromium, type Browser, type Page } from "playwright-core";
import { createApiKey } from "../../src/auth/api-keys";
import { startAnvil, type Anvil } from "../../src/chain/anvil";
import { publicClientFor } from "../../src/chain/clients";
import { demoAnvilArgs, seedDemo } from "../../src/cli/dev";
import { loadConfig } from "../../src/common/config";
import type { CohortsResponse, MrrResponse } from "../../src/http/features/mrr/model";
import type { StatsResponse } from "../../src/http/features/stats/model";
import { startService, type Service } from "../../src/service";
import { freePort } from "../../testkit/cli";
import { createTestDb } from "../../testkit/db";
import { formatAmount } from "../../src/dashboard/format";

const SHOTS = process.env.DASHBOARD_SHOTS || "/tmp/dashboard-shots";
const CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"];

let anvil: Anvil;
let service: Service;
let browser: Browser;
let origin: string;
let merchant: string;
let apiKey: string;
const errors: string[] = [];
const outside: string[] = [];

beforeAll(async () => {
  anvil = await startAnvil({ args: demoAnvilArgs() });
  const seeded = await seedDemo(anvil.rpcUrl, anvil.chainId);
  const port = await freePort();
  const config = loadConfig({
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
  await service.indexer!.waitForBlock(await publicClientFor(anvil.rpcUrl).getBlockNumber({ cacheTime: 0 }));
  merchant = seeded.merchant.toLowerCase();
  apiKey = (await createApiKey(service.db.sql, { merchant, label: "revenue test" })).key;
  origin = service.url!;
  browser = await chromium.launch({ executablePath: "/usr/bin/chromium", args: CHROMIUM_ARGS });
  mkdirSync(SHOTS, { recursive: true });
}, 90_000);

afterAll(async () => {
  await browser?.close();
  await service?.stop();
  await anvil?.stop();
}, 30_000);

async function api<T>(path: string): Promise<T> {
  const res = await fetch(origin + path, { headers: { authorization: `Bearer ${apiKey}` } });
  expect(res.status, path).toBe(200);
  return (await res.json()) as T;
}

/** A signed-in page of `width` px, its errors and off-origin requests recorded. */
async function signedIn(width: number): Promise<Page> {
  const context = await browser.newContext({
    viewport: { width, height: width < 500 ? 844 : 900 },
    acceptDownloads: true,
  });
  const page = await context.newPage();
  page.on("console", (m) => m.type() === "error" && errors.push(m.text()));
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("request", (r) => !r.url().startsWith(origin) && !r.url().startsWith("data:") && outside.push(r.url()));
  await page.goto(`${origin}/dashboard#key=${apiKey}&merchant=${merchant}`);
  await page.click("[data-confirm-link]", { timeout: 30_000 });
  await page.waitForSelector('main[data-ready="#/"]', { timeout: 30_000 });
  return page;
}

async function go(page: Page, hash: string): Promise<void> {
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForSelector(`main[data-ready="${hash}"]`, { timeout: 30_000 });
}

const chartData = async (page: Page, selector: string) =>
  JSON.parse((await page.locator(selector).first().getAttribute("data-chart"))!);

/** Every figure of the Revenue page against the API's, for one interval; returns the MRR response. */
async function checkRevenue(page: Page, interval: "day" | "week" | "month"): Promise<MrrResponse> {
  await go(page, `#/revenue?interval=${interval}&cohorts=month&metric=customers`);
  const mrr = await api<MrrResponse>(`/v0/stats/${merchant}/mrr?interval=${interval}`);
  expect(mrr.tokens.map((t) => t.currency).sort()).toEqual(["DAI", "USDC"]);
  for (const t of mrr.tokens) {
    const section = page.locator(`.token-section[data-token="${t.currency}"]`);
    for (const k of ["mrr", "arr", "arpa"] as const) {
      expect(await section.locator(`[data-kpi="${k}"]`).getAttribute("data-value"), `${t.currency} ${k}`).toBe(t[k]);
    }
    expect(await section.locator(`[data-kpi="customers"]`).getAttribute("data-value")).toBe(String(t.customers));
    expect(await section.locator(`[data-kpi="ltv"]`).getAttribute("data-value")).toBe(t.ltv ?? "");
    // The MRR chart's points: the API's periods, MRR at each end and every kind's amount.
    const chart = JSON.parse((await section.locator(".mrr-chart").getAttribute("data-chart"))!);
    expect(chart.periods).toEqual(t.periods.map((p) => p.period_start));
    expect(chart.mrr_end).toEqual(t.periods.map((p) => p.mrr_end));
    for (const k of ["new", "expansion", "contraction", "churn", "reactivation"] as const) {
      expect(chart[k], k).toEqual(t.periods.map((p) => p.movements[k].amount));
    }
    expect(await section.locator(".mrr-chart").locator("canvas").count()).toBeGreaterThan(0);
    // The legend shows the latest period's amounts; hovering the first period shows that period's.
    const legend = () => section.locator(".mrr-chart .u-legend .u-value").allTextContents();
    const [first, last] = [t.periods[0]!, t.periods.at(-1)!];
    const text = (p: typeof first, k: "new" | "churn") =>
      `${formatAmount(p.movements[k].amount, t.token_decimals, t.currency)} (${p.movements[k].count})`;
    expect(await legend()).toContain(formatAmount(last.mrr_end, t.token_decimals, t.currency));
    expect(await legend()).toContain(text(last, "new"));
    const over = section.locator(".mrr-chart .u-over");
    await over.hover({ position: { x: 2, y: 10 } });
    await page.waitForFunction(
      ([sel, want]) => [...document.querySelectorAll(sel!)].some((e) => e.textContent === want),
      [
        `.token-section[data-token="${t.currency}"] .mrr-chart .u-legend .u-value`,
        formatAmount(first.mrr_end, t.token_decimals, t.currency),
      ],
      { timeout: 5000 },
    );
    expect(await legend()).toContain(text(first, "new"));
    expect(await legend()).toContain(text(first, "churn"));
    await page.mouse.move(0, 0);
    // Rates per period (the table), and churn by reason and recovered revenue summed over the range.
    for (const p of t.periods) {
      const row = section.locator(`tr[data-period="${p.period_start}"]`);
      expect(await row.locator('[data-rate="mrr_end"]').getAttribute("data-value")).toBe(p.mrr_end);
      expect(await row.locator('[data-rate="nrr"]').getAttribute("data-value")).toBe(p.nrr ?? "");
      expect(await row.locator('[data-rate="subscriber_churn_rate"]').getAttribute("data-value")).toBe(
        p.subscriber_churn_rate ?? "",
      );
    }
    for (const reason of Object.keys(t.periods[0]!.churn_by_reason)) {
      const sum = (f: "count" | "amount") =>
        t.periods.reduce((n, p) => n + BigInt(p.churn_by_reason[reason as keyof (typeof p)["churn_by_reason"]][f]), 0n);
      const cell = section.locator(`[data-churn-reason="${reason}"]`);
      expect(await cell.getAttribute("data-count"), reason).toBe(sum("count").toString());
      expect(await cell.getAttribute("data-value"), reason).toBe(sum("amount").toString());
    }
    const recovered = t.periods.reduce((n, p) => n + BigInt(p.recovered.amount), 0n);
    expect(await section.locator('[data-kpi="recovered"]').getAttribute("data-value")).toBe(recovered.toString());
  }
  return mrr;
}

/** The cohort heatmap's cells against the cohorts API's. */
async function checkCohorts(page: Page, interval: "month" | "week", metric: "customers" | "revenue") {
  await go(page, `#/revenue?interval=week&cohorts=${interval}&metric=${metric}`);
  const body = await api<CohortsResponse>(`/v0/stats/${merchant}/cohorts?interval=${interval}`);
  expect(body.tokens.length).toBeGreaterThan(0);
  for (const t of body.tokens) {
    const map = page.locator(`.heatmap[data-token="${t.currency}"]`);
    expect(await map.locator("tbody tr").count()).toBe(t.cohorts.length);
    for (const c of t.cohorts) {
      const row = map.locator(`tr[data-cohort="${c.cohort_start}"]`);
      expect(await row.locator("[data-size]").getAttribute("data-size")).toBe(String(c.size));
      for (const p of c.periods) {
        const cell = row.locator(`td[data-n="${p.n}"]`);
        const want = metric === "customers" ? p.customer_retention : p.revenue_retention;
        expect(await cell.getAttribute("data-value"), `${c.cohort_start} ${p.n}`).toBe(want ?? "");
        expect(await cell.getAttribute("data-customers")).toBe(String(p.customers));
        expect(await cell.getAttribute("data-mrr")).toBe(p.mrr);
      }
    }
  }
  return body;
}

test("the demo's months of history give every chart a shape, and the Revenue page shows the API's numbers at 1280 and 390 px", async () => {
  for (const width of [1280, 390]) {
    const page = await signedIn(width);
    // The overview's revenue: bars of gross per period (net and fees), the API's figures.
    await go(page, "#/overview?interval=week");
    const stats = await api<StatsResponse>(`/v0/stats/${merchant}?interval=week`);
    for (const currency of ["USDC", "DAI"]) {
      const chart = await chartData(page, `.token-block[data-token="${currency}"] .chart`);
      const rows = new Map(stats.revenue.filter((r) => r.currency === currency).map((r) => [r.period_start, r]));
      expect(chart.fees).toEqual(stats.periods.map((p) => rows.get(p)?.fees ?? "0"));
      // A shape: charges in most weeks of the range, not one bar.
      expect(chart.gross.filter((g: string) => g !== "0").length).toBeGreaterThan(stats.periods.length / 2);
    }
    await page.screenshot({ path: `${SHOTS}/dashboard-overview-${width}.png`, fullPage: true });

    await checkRevenue(page, "day");
    await checkRevenue(page, "month");
    const week = await checkRevenue(page, "week");
    // A shape on first open: the MRR grew over the weeks, and every kind of movement and churn group occurred.
    const usdc = week.tokens.find((t) => t.currency === "USDC")!;
    expect(BigInt(usdc.periods.at(-1)!.mrr_end)).toBeGreaterThan(BigInt(usdc.periods[0]!.mrr_start));
    const kinds = new Set(
      week.tokens.flatMap((t) =>
        t.periods.flatMap((p) => Object.entries(p.movements).flatMap(([k, f]) => (f.count ? [k] : []))),
      ),
    );
    expect(kinds).toEqual(new Set(["new", "expansion", "contraction", "churn", "reactivation"]));
    const reasons = new Set(
      week.tokens.flatMap((t) =>
        t.periods.flatMap((p) => Object.entries(p.churn_by_reason).flatMap(([r, f]) => (f.count ? [r] : []))),
      ),
    );
    for (const r of ["cancelled_by_subscriber", "blocked", "paused", "InsufficientBalance"])
      expect(reasons).toContain(r);
    expect(week.tokens.some((t) => t.periods.some((p) => p.recovered.count > 0))).toBe(true);
    await page.mouse.move(0, 0);
    await page.evaluate(() => scrollTo(0, 0));
    await page.screenshot({ path: `${SHOTS}/dashboard-revenue-${width}.png`, fullPage: true });

    if (width === 1280) {
      // The movements CSV is fetched with the credential and is the API's.
      const [download] = await Promise.all([page.waitForEvent("download"), page.click("[data-movements-csv]")]);
      const saved = readFileSync((await download.path())!, "utf8");
      const res = await fetch(`${origin}/v0/stats/${merchant}/mrr/movements?format=csv`, {
        headers: { authorization: `Bearer ${apiKey}` },
      });
      expect(saved).toBe(await res.text());
      expect(saved.split("\r\n").length).toBeGreaterThan(50);
    }
    const months = await checkCohorts(page, "month", "customers");
    expect(months.tokens.some((t) => t.cohorts.length >= 4)).toBe(true);
    await checkCohorts(page, "month", "revenue");
    await checkCohorts(page, "week", "customers");
    // At 390 px nothing is wider than the screen but the tables, which scroll in their own box.
    if (width === 390) {
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
      expect(overflow).toBeLessThanOrEqual(0);
    }
    await page.context().close();
  }
  expect(errors).toEqual([]);
  expect(outside).toEqual([]);
}, 180_000);
