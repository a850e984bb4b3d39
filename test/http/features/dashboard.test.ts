/**
 * `/dashboard` as served: the page with a strict CSP and no inline code, the bundled script and styles from memory
 * (uPlot inside, nothing from another host), conditional requests, and none of it in the OpenAPI document.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { DASHBOARD_CSP } from "../../../src/http/features/dashboard";
import { startSeededApp, type SeededApp } from "../../../testkit/app";

let s: SeededApp;

beforeAll(async () => {
  s = await startSeededApp();
}, 60_000);

afterAll(async () => {
  await s?.close();
});

const get = (path: string, headers: Record<string, string> = {}) =>
  s.app.handle(new Request(`http://localhost${path}`, { headers }));

test("the page: HTML with a strict CSP, no inline script or style, only same-origin assets", async () => {
  for (const path of ["/dashboard", "/dashboard/"]) {
    const res = await get(path);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/html");
    expect(res.headers.get("content-security-policy")).toBe(DASHBOARD_CSP);
    expect(res.headers.get("x-frame-options")).toBe("DENY");
    const html = await res.text();
    const scripts = [...html.matchAll(/<script\b([^>]*)>([\s\S]*?)<\/script>/g)];
    expect(scripts.length).toBe(1);
    for (const [, attrs, body] of scripts) {
      expect(attrs).toContain('src="/dashboard/assets/main.js"');
      expect(body!.trim()).toBe("");
    }
    expect(html).not.toMatch(/<style|\sstyle=|\son[a-z]+=/i);
    expect(html).not.toMatch(/https?:\/\//);
    expect(html).toContain('href="/dashboard/assets/styles.css"');
  }
  const csp = DASHBOARD_CSP.split(";").map((d) => d.trim());
  expect(csp).toContain("default-src 'self'");
  expect(csp).toContain("script-src 'self'");
  expect(DASHBOARD_CSP).not.toContain("unsafe");
});

test("the assets: bundled script (uPlot included) and styles, cached by ETag, no other host", async () => {
  const js = await get("/dashboard/assets/main.js");
  expect(js.status).toBe(200);
  expect(js.headers.get("content-type")).toContain("javascript");
  expect(js.headers.get("content-security-policy")).toBe(DASHBOARD_CSP);
  const code = await js.text();
  expect(code).toContain("uplot"); // uPlot's class names: the library is in the bundle, not fetched
  expect(code).not.toMatch(/\bimport\s*\(\s*["']https?:|from\s*["']https?:/);
  const css = await get("/dashboard/assets/styles.css");
  expect(css.status).toBe(200);
  expect(css.headers.get("content-type")).toContain("text/css");
  const styles = await css.text();
  expect(styles).toContain(".u-legend"); // uPlot's stylesheet, bundled
  expect(styles).not.toMatch(/url\(\s*["']?https?:|@import/);
  const etag = js.headers.get("etag")!;
  expect(etag).toMatch(/^".+"$/);
  const again = await get("/dashboard/assets/main.js", { "if-none-match": etag });
  expect(again.status).toBe(304);
  expect(await again.text()).toBe("");
});

test("an unknown asset is a 404 envelope; the dashboard is not an API operation", async () => {
  const res = await get("/dashboard/assets/nope.js");
  expect(res.status).toBe(404);
  expect(((await res.json()) as { error: { code: string } }).error.code).toBe("not_found");
  const doc = (await (await get("/docs/json")).json()) as { paths: Record<string, Record<string, unknown>> };
  expect(Object.keys(doc.paths).filter((p) => p.startsWith("/dashboard"))).toEqual([]);
  expect(doc.paths["/v0/stats/{merchant}"]?.get).toBeDefined();
  expect(doc.paths["/v0/api_keys/{merchant}"]?.get).toBeDefined();
  expect(doc.paths["/v0/api_keys/{merchant}/{id}"]?.delete).toBeDefined();
});
