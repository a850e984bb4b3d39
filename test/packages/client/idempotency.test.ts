/**
 * The client and the service together: a key creation whose answer is lost (the service minted the key, a proxy in
 * between answers 502 instead) is retried by the client with the same `Idempotency-Key`, and the service answers the
 * retry with the first answer: one key minted, and the caller gets its secret.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { createClient } from "../../../packages/client/src/index";
import { accounts } from "../../../testkit/accounts";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { M1 } from "../../../testkit/seed";
import { signIn } from "../../../testkit/siwe";

let s: SeededApp;
let session: string;
let proxy: ReturnType<typeof Bun.serve>;
let lose = 0;
const keys: (string | null)[] = [];

beforeAll(async () => {
  s = await startSeededApp();
  session = await signIn(s.app, accounts.merchant);
  // Forwards to the real app; the first `lose` answers are replaced by a gateway error after the app acted.
  proxy = Bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    async fetch(req) {
      keys.push(req.headers.get("idempotency-key"));
      const res = await s.app.handle(req);
      if (lose > 0) {
        lose--;
        await res.body?.cancel();
        return new Response("<html>502 Bad Gateway</html>", { status: 502 });
      }
      return res;
    },
  });
}, 60_000);

afterAll(async () => {
  proxy?.stop(true);
  await s?.close();
});

const count = async () =>
  (await s.db.sql<{ n: number }[]>`select count(*)::int as n from api_keys where merchant = ${M1}`)[0]!.n;

test("a retried key creation never mints a second key, and returns the secret of the one minted", async () => {
  const client = createClient({
    baseUrl: `http://127.0.0.1:${proxy.port}`,
    apiKey: session,
    retry: { initialDelayMs: 10 },
  });
  const before = await count();
  lose = 1;
  keys.length = 0;
  const { data, response } = await client.POST("/v0/api_keys/{merchant}", {
    params: { path: { merchant: M1 } },
    body: { label: "lost answer" },
  });
  expect(response.status).toBe(201);
  expect(response.headers.get("idempotent-replayed")).toBe("true");
  expect(keys.length).toBe(2);
  expect(keys[0]).not.toBeNull();
  expect(keys[1]).toBe(keys[0]);
  expect(await count()).toBe(before + 1);
  // The secret returned is the minted key's: it reads the merchant's data.
  const reader = createClient({ baseUrl: `http://127.0.0.1:${proxy.port}`, apiKey: data!.key });
  const { response: read } = await reader.GET("/v0/subscriptions/{merchant}", { params: { path: { merchant: M1 } } });
  expect(read.status).toBe(200);
});
