/**
 * `bun run webhook` as a process: on the database itself (DATABASE_URL or an embedded data directory nobody holds),
 * and through the control routes of a running service that holds the embedded one. Deliveries go to a real receiver
 * and verify with `standardwebhooks`.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import postgres from "postgres";
import { Webhook } from "standardwebhooks";
import { createApiKey } from "../../src/auth/api-keys";
import type { Service } from "../../src/service";
import { accounts } from "../../testkit/accounts";
import { runCommand } from "../../testkit/cli";
import { startEmbeddedApi } from "../../testkit/embedded";
import { startReceiver, type Receiver } from "../../testkit/webhooks";

const merchant = accounts.merchant.address.toLowerCase();

const webhook = (env: Record<string, string>, ...args: string[]) => runCommand("src/cli/webhook.ts", env, ...args);

let receiver: Receiver;
beforeAll(() => {
  receiver = startReceiver();
});
afterAll(async () => {
  await receiver?.stop();
});

describe("on the database itself", () => {
  const env: Record<string, string> = {};
  let drop = async () => {};

  beforeAll(async () => {
    if (process.env.DATABASE_URL) {
      const name = `t_cli_${Date.now().toString(36)}`;
      const admin = postgres(process.env.DATABASE_URL, { max: 1, onnotice: () => {} });
      await admin.unsafe(`create database ${name}`);
      const url = new URL(process.env.DATABASE_URL);
      url.pathname = `/${name}`;
      env.DATABASE_URL = url.toString();
      drop = async () => {
        await admin.unsafe(`drop database if exists ${name} with (force)`);
        await admin.end();
      };
    } else env.DATA_DIR = mkdtempSync(join(tmpdir(), "webhook-cli-"));
  });
  afterAll(() => drop());

  test("bad input is refused with a message and exit code 1", async () => {
    const none = await webhook(env, "create", "--url", receiver.url);
    expect(none.code).toBe(1);
    expect(none.stderr).toContain("--merchant");
    const priv = await webhook(env, "create", "--merchant", merchant, "--url", receiver.url);
    expect(priv.code).toBe(1);
    expect(priv.stderr).toMatch(/https/);
    const types = await webhook(
      { ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "1" },
      "create",
      "--merchant",
      merchant,
      "--url",
      receiver.url,
      "--events",
      "charge.nope",
    );
    expect(types.code).toBe(1);
    expect(types.stderr).toContain("event_types");
    expect((await webhook(env, "delete", "we_000000000000000000000000")).code).toBe(1);
    expect(JSON.parse((await webhook(env, "list", "--json")).stdout)).toEqual([]);
  }, 60_000);

  test("create, list, test (signed, verifies) and delete", async () => {
    const dev = { ...env, WEBHOOK_ALLOW_PRIVATE_URLS: "1" };
    const created = await webhook(
      dev,
      "create",
      "--merchant",
      merchant,
      "--url",
      receiver.url,
      "--events",
      "charge.failed,charge.succeeded",
      "--json",
    );
    expect(created.code).toBe(0);
    const ep = JSON.parse(created.stdout);
    expect(ep.id).toMatch(/^we_/);
    expect(ep.secret).toMatch(/^whsec_/);
    expect(ep.event_types).toEqual(["charge.failed", "charge.succeeded"]);

    const listed = await webhook(dev, "list", "--merchant", merchant);
    expect(listed.stdout).toContain(ep.id);
    expect(listed.stdout).not.toContain(ep.secret);

    const before = receiver.received.length;
    const tested = await webhook(dev, "test", ep.id, "--json");
    expect(tested.code).toBe(0);
    expect(JSON.parse(tested.stdout)).toMatchObject({ status: "succeeded", response_status: 200, attempt: 1 });
    const got = receiver.received.slice(before);
    expect(got).toHaveLength(1);
    const payload = new Webhook(ep.secret).verify(got[0]!.body, got[0]!.headers) as { type: string };
    expect(payload.type).toBe("webhook.test");

    expect((await webhook(dev, "delete", ep.id)).code).toBe(0);
    expect(JSON.parse((await webhook(dev, "list", "--json")).stdout)).toEqual([]);
  }, 60_000);
});

describe("while a service holds the embedded database", () => {
  let service: Service;
  let dataDir: string;

  beforeAll(async () => {
    ({ service, dataDir } = await startEmbeddedApi("webhook-running-", { WEBHOOK_ALLOW_PRIVATE_URLS: "1" }));
  }, 60_000);
  afterAll(async () => {
    await service?.stop();
  });

  test("the endpoint made by the command is the API's, and test and delete go through the service", async () => {
    const env = { DATA_DIR: dataDir };
    const created = await webhook(env, "create", "--merchant", merchant, "--url", receiver.url, "--json");
    expect(created.code).toBe(0);
    const ep = JSON.parse(created.stdout);
    const { key } = await createApiKey(service.db.sql, { merchant });
    const auth = { authorization: `Bearer ${key}` };
    const res = await fetch(`${service.url}/v0/webhook_endpoints/${merchant}/${ep.id}`, { headers: auth });
    expect(res.status).toBe(200);
    expect(await res.json()).toMatchObject({ id: ep.id, url: receiver.url, event_types: ["*"], enabled: true });

    const before = receiver.received.length;
    const tested = await webhook(env, "test", ep.id);
    expect(tested.code).toBe(0);
    expect(tested.stdout).toContain("succeeded");
    expect(
      new Webhook(ep.secret).verify(receiver.received[before]!.body, receiver.received[before]!.headers),
    ).toBeTruthy();

    expect((await webhook(env, "delete", ep.id)).code).toBe(0);
    const gone = await fetch(`${service.url}/v0/webhook_endpoints/${merchant}/${ep.id}`, { headers: auth });
    expect(gone.status).toBe(404);
    const again = await webhook(env, "delete", ep.id);
    expect(again.code).toBe(1);
    expect(again.stderr).toContain(ep.id);
  }, 60_000);
});
