/**
 * `bun run apikey` while a service holds the embedded database: PGlite admits one process, so the command goes
 * through the service's local control endpoint (token in DATA_DIR/control.json), and the key works at once.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { existsSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import type { Service } from "../../src/service";
import { accounts } from "../../testkit/accounts";
import { runCommand } from "../../testkit/cli";
import { startEmbeddedApi } from "../../testkit/embedded";

let service: Service;
let dataDir: string;
const merchant = accounts.merchant.address.toLowerCase();

const apikey = (...args: string[]) => runCommand("src/cli/apikey.ts", { DATA_DIR: dataDir }, ...args);

beforeAll(async () => {
  ({ service, dataDir } = await startEmbeddedApi("apikey-running-"));
}, 60_000);

afterAll(async () => {
  await service?.stop();
});

test("the control file is private to the owner", () => {
  const path = join(dataDir, "control.json");
  expect(existsSync(path)).toBe(true);
  expect(statSync(path).mode & 0o777).toBe(0o600);
});

test("create, use, list and revoke a key while the service runs", async () => {
  const created = await apikey("create", "--merchant", accounts.merchant.address, "--json");
  expect(created.code).toBe(0);
  const { id, key, merchant: m } = JSON.parse(created.stdout);
  expect(m).toBe(merchant);
  expect(key).toStartWith("sk_live_");

  const get = () =>
    fetch(`${service.url}/v0/subscriptions/${merchant}`, { headers: { authorization: `Bearer ${key}` } });
  const ok = await get();
  expect(ok.status).toBe(200);
  expect(await ok.json()).toEqual([]);

  const listed = await apikey("list", "--merchant", merchant, "--json");
  expect(listed.code).toBe(0);
  const keys = JSON.parse(listed.stdout);
  expect(keys.map((k: { id: string }) => k.id)).toContain(id);
  expect(listed.stdout).not.toContain(key);

  expect((await apikey("revoke", id)).code).toBe(0);
  expect((await get()).status).toBe(401);
  const again = await apikey("revoke", id);
  expect(again.code).toBe(1);
  expect(again.stderr).toContain(id);
}, 60_000);

test("the control routes listen on the loopback only, apart from the API, and refuse anyone without the token", async () => {
  const control = JSON.parse(readFileSync(join(dataDir, "control.json"), "utf8")) as { url: string };
  expect(new URL(control.url).hostname).toBe("127.0.0.1");
  expect(new URL(control.url).port).not.toBe(new URL(service.url!).port);
  const post = (base: string) =>
    fetch(`${base}/internal/api-keys`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: "Bearer ctl_wrong" },
      body: JSON.stringify({ merchant }),
    });
  const res = await post(control.url);
  expect(res.status).toBe(401);
  // The public listener does not serve them at all.
  expect((await post(service.url!)).status).toBe(404);
  const docs = await (await fetch(`${service.url}/docs/json`)).text();
  expect(docs).not.toContain("/internal/");
});

test("after the service stops, the command opens the database itself", async () => {
  await service.stop();
  expect(existsSync(join(dataDir, "control.json"))).toBe(false);
  const created = await apikey("create", "--merchant", merchant, "--json");
  expect(created.code).toBe(0);
  expect(JSON.parse(created.stdout).merchant).toBe(merchant);
}, 60_000);
