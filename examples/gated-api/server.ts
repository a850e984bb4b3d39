/**
 * `bun examples/gated-api/server.ts`: serves {@link createGatedApi} on PORT (default 8787). Env: SUBS_URL (default
 * http://127.0.0.1:3000), MODULE, PLANS (comma-separated, default 1), RPC_URL (default http://127.0.0.1:8545),
 * COOKIE_SECRET (default: random, so sessions end with the process), WEBHOOK_SECRET (optional), DOMAIN (default
 * localhost:PORT).
 */
import { createGatedApi } from "./app";

const port = Number(process.env.PORT ?? 8787);
const module = process.env.MODULE;
if (!module) {
  console.error("MODULE is required: the subscription module whose plans open /premium (bun run dev prints one)");
  process.exit(1);
}
const app = createGatedApi({
  subsUrl: process.env.SUBS_URL ?? "http://127.0.0.1:3000",
  module,
  plans: (process.env.PLANS ?? "1").split(",").map(Number),
  rpcUrl: process.env.RPC_URL ?? "http://127.0.0.1:8545",
  domain: process.env.DOMAIN ?? `localhost:${port}`,
  cookieSecret: process.env.COOKIE_SECRET ?? crypto.randomUUID() + crypto.randomUUID(),
  webhookSecret: process.env.WEBHOOK_SECRET,
});
Bun.serve({ port, fetch: app.fetch });
console.log(`gated API on http://localhost:${port}: GET /nonce, POST /login {message, signature}, GET /premium`);
