/**
 * `webhooks.verify()` of the client: a real `webhook.test` delivery of the service to a real receiver verifies and
 * comes back typed; signatures agree with the `standardwebhooks` library both ways; a changed body, another secret,
 * an old or future timestamp, a missing header or a body that is not an event are refused; during a rotation either
 * secret verifies.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { Webhook } from "standardwebhooks";
import {
  createClient,
  signWebhook,
  verifyWebhook,
  webhooks,
  WebhookVerificationError,
  type WebhookEvent,
  type WebhookEventOf,
} from "../../../packages/client/src/index";
import { createApiKey } from "../../../src/auth/api-keys";
import { startSeededApp, type SeededApp } from "../../../testkit/app";
import { startReceiver, type Receiver } from "../../../testkit/webhooks";
import { M1 } from "../../../testkit/seed";

let s: SeededApp;
let receiver: Receiver;
let server: ReturnType<typeof Bun.serve>;
let apiKey: string;

beforeAll(async () => {
  s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
  apiKey = (await createApiKey(s.db.sql, { merchant: M1 })).key;
  receiver = startReceiver();
  server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: (req) => s.app.handle(req) });
}, 60_000);

afterAll(async () => {
  server?.stop(true);
  await receiver?.stop();
  await s?.close();
});

const secret = `whsec_${Buffer.from("0123456789abcdef0123456789abcdef").toString("base64")}`;
const otherSecret = `whsec_${Buffer.from("fedcba9876543210fedcba9876543210").toString("base64")}`;
const body = JSON.stringify({
  id: "evt_1",
  type: "charge.succeeded",
  timestamp: "2026-11-20T10:00:00.000Z",
  chain_id: 31337,
  merchant: M1,
  block_number: "1",
  data: { object: {} },
});

describe("a real delivery of the service", () => {
  test("verifies with the endpoint's secret and comes back as a typed event", async () => {
    const client = createClient({ baseUrl: `http://127.0.0.1:${server.port}`, apiKey });
    const { data: endpoint } = await client.POST("/v0/webhook_endpoints/{merchant}", {
      params: { path: { merchant: M1 } },
      body: { url: receiver.url },
    });
    const created = endpoint as { id: string; secret: string };
    expect(created.secret).toStartWith("whsec_");
    await client.POST("/v0/webhook_endpoints/{merchant}/{id}/test", {
      params: { path: { merchant: M1, id: created.id } },
    });
    const delivery = receiver.received.at(-1)!;
    expect(delivery).toBeDefined();

    const event = await client.webhooks.verify(delivery.body, delivery.headers, created.secret);
    expect(event.type).toBe("webhook.test");
    expect(event.id).toBe(delivery.id);
    if (event.type !== "webhook.test") throw new Error("unreachable");
    // Narrowed by `type`: data.object is the test event's.
    const endpointId: string = event.data.object.endpoint_id;
    expect(endpointId).toBe(created.id);
    // As a Headers object too, and as bytes.
    const asBytes = await verifyWebhook(
      new TextEncoder().encode(delivery.body),
      new Headers(delivery.headers),
      created.secret,
    );
    expect(asBytes.id).toBe(event.id);
    // Another endpoint's secret does not verify it.
    await expect(webhooks.verify(delivery.body, delivery.headers, otherSecret)).rejects.toMatchObject({
      code: "invalid_signature",
    });
  });
});

describe("signatures", () => {
  const now = Date.now();
  const ts = Math.floor(now / 1000);
  const headersFor = async (sig: string, t = ts) => ({
    "webhook-id": "evt_1",
    "webhook-timestamp": String(t),
    "webhook-signature": sig,
  });

  test("agree with the standardwebhooks library both ways", async () => {
    const lib = new Webhook(secret);
    const theirs = lib.sign("evt_1", new Date(ts * 1000), body);
    expect(await signWebhook(secret, "evt_1", ts, body)).toBe(theirs);
    const event = await verifyWebhook(body, await headersFor(theirs), secret, { now });
    expect(event.type).toBe("charge.succeeded");
    const ours = await signWebhook(secret, "evt_1", ts, body);
    expect(() =>
      lib.verify(body, { "webhook-id": "evt_1", "webhook-timestamp": String(ts), "webhook-signature": ours }),
    ).not.toThrow();
  });

  test("refuse a changed body, another secret, an old or future timestamp, a missing header, a non-event", async () => {
    const sig = await signWebhook(secret, "evt_1", ts, body);
    const refused = async (p: Promise<unknown>, code: string) => {
      const err = (await p.catch((e) => e)) as WebhookVerificationError;
      expect(err).toBeInstanceOf(WebhookVerificationError);
      expect(err.code).toBe(code);
    };
    await refused(
      verifyWebhook(body.replace("evt_1", "evt_2"), await headersFor(sig), secret, { now }),
      "invalid_signature",
    );
    await refused(verifyWebhook(body, await headersFor(sig), otherSecret, { now }), "invalid_signature");
    const old = ts - 301;
    await refused(
      verifyWebhook(body, await headersFor(await signWebhook(secret, "evt_1", old, body), old), secret, { now }),
      "timestamp_out_of_tolerance",
    );
    const future = ts + 301;
    await refused(
      verifyWebhook(body, await headersFor(await signWebhook(secret, "evt_1", future, body), future), secret, { now }),
      "timestamp_out_of_tolerance",
    );
    await refused(
      verifyWebhook(body, { "webhook-id": "evt_1", "webhook-signature": sig }, secret, { now }),
      "missing_header",
    );
    await refused(verifyWebhook(body, await headersFor(sig, Number.NaN), secret, { now }), "invalid_timestamp");
    const notJson = "not json";
    await refused(
      verifyWebhook(notJson, await headersFor(await signWebhook(secret, "evt_1", ts, notJson)), secret, { now }),
      "invalid_body",
    );
    await refused(
      verifyWebhook("[1]", await headersFor(await signWebhook(secret, "evt_1", ts, "[1]")), secret, { now }),
      "invalid_body",
    );
  });

  test("during a rotation: two signatures in the header, or two secrets to try, either verifies", async () => {
    const both = `${await signWebhook(otherSecret, "evt_1", ts, body)} ${await signWebhook(secret, "evt_1", ts, body)}`;
    expect((await verifyWebhook(body, await headersFor(both), secret, { now })).id).toBe("evt_1");
    const one = await signWebhook(otherSecret, "evt_1", ts, body);
    expect((await verifyWebhook(body, await headersFor(one), [secret, otherSecret], { now })).id).toBe("evt_1");
  });

  test("the union covers every event type of the document, narrowed by type", () => {
    const types: WebhookEvent["type"][] = [
      "charge.succeeded",
      "charge.failed",
      "credit.refilled",
      "subscription.created",
      "subscription.status_changed",
      "subscription.renewal_upcoming",
      "subscription.renewal_at_risk",
      "subscription.renewal_recovered",
      "event.reverted",
      "webhook.test",
      "customer.churned",
      "customer.reactivated",
    ];
    expect(new Set(types).size).toBe(12);
    const reverted = (e: WebhookEventOf<"event.reverted">) => e.data.object.user_address;
    const churned = (e: WebhookEventOf<"customer.churned">) => e.data.object.reason;
    expect(typeof reverted).toBe("function");
    expect(typeof churned).toBe("function");
  });
});
