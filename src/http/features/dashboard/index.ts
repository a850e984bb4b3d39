/**
 * `/dashboard`: the merchant dashboard, one more client of `/v0`. The page is static HTML; its script and styles
 * are bundled from src/dashboard by `Bun.build` on the first request and kept in memory, so the page works with no
 * internet. A strict Content-Security-Policy allows nothing but this origin (no inline script or style).
 */
import { Elysia } from "elysia";
import { join } from "node:path";
import { NotFoundError } from "../../errors";

const SOURCE_DIR = join(import.meta.dir, "..", "..", "..", "dashboard");

/** The page's Content-Security-Policy: this origin only, no inline code, no framing. */
export const DASHBOARD_CSP =
  "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
  "font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/** A bundled asset held in memory. */
type Asset = { body: ArrayBuffer; type: string; etag: string };

/** Bundles src/dashboard (script + styles, uPlot included) into named in-memory assets. */
export async function buildDashboardAssets(): Promise<Map<string, Asset>> {
  const result = await Bun.build({
    entrypoints: [join(SOURCE_DIR, "main.ts"), join(SOURCE_DIR, "styles.css")],
    target: "browser",
    minify: true,
    naming: "[name].[ext]",
  });
  if (!result.success) throw new AggregateError(result.logs, "dashboard bundle failed");
  const assets = new Map<string, Asset>();
  for (const out of result.outputs) {
    const body = await out.arrayBuffer();
    const name = out.path.replace(/^.*\//, "");
    const etag = `"${Bun.hash(body).toString(36)}"`;
    assets.set(name, { body, type: out.type, etag });
  }
  return assets;
}

const PAGE = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="no-referrer">
<link rel="icon" href="data:,">
<title>Dashboard · Subscription payments</title>
<link rel="stylesheet" href="/dashboard/assets/styles.css">
<script type="module" src="/dashboard/assets/main.js"></script>
</head>
<body>
<div id="app"><p class="boot">Loading…</p></div>
</body>
</html>
`;

const securityHeaders = {
  "content-security-policy": DASHBOARD_CSP,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "x-frame-options": "DENY",
};

/** The dashboard page and its assets (not part of the OpenAPI document). */
export function dashboardRoutes() {
  let assets: Promise<Map<string, Asset>> | undefined;
  const load = () =>
    (assets ??= buildDashboardAssets().catch((err) => {
      assets = undefined; // a failed build is retried on the next request
      throw err;
    }));
  const page = () =>
    new Response(PAGE, {
      headers: { ...securityHeaders, "content-type": "text/html;charset=utf-8", "cache-control": "no-cache" },
    });
  return new Elysia({ name: "dashboard" })
    .get("/dashboard", page, { detail: { hide: true } })
    .get("/dashboard/", page, { detail: { hide: true } })
    .get(
      "/dashboard/assets/:name",
      async ({ params, request }) => {
        const asset = (await load()).get(params.name);
        if (!asset) throw new NotFoundError("no such dashboard asset");
        const headers = {
          ...securityHeaders,
          "content-type": asset.type,
          "cache-control": "no-cache",
          etag: asset.etag,
        };
        if (request.headers.get("if-none-match") === asset.etag) return new Response(null, { status: 304, headers });
        return new Response(asset.body, { headers });
      },
      { detail: { hide: true } },
    );
}
