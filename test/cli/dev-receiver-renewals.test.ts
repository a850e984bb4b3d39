import { describe, expect, test } from "bun:test";
import { startDemoReceiver } from "../../src/cli/dev/receiver";
import { signatureHeader } from "../../src/webhooks/sign";

const SECRET = `whsec_${Buffer.alloc(32, 7).toString("base64")}`;

/** Posts a signed event to the demo receiver and returns the line it printed. */
async function lineFor(event: Record<string, unknown>): Promise<string> {
  const lines: string[] = [];
  const receiver = startDemoReceiver((line) => lines.push(line));
  receiver.secret = SECRET;
  try {
    const body = JSON.stringify(event);
    const ts = Math.floor(Date.now() / 1000);
    const res = await fetch(receiver.url, {
      method: "POST",
      headers: {
        "content-type": "application/json",
        "webhook-id": String(event.id),
        "webhook-timestamp": String(ts),
        "webhook-signature": signatureHeader(String(event.id), ts, body, [SECRET]),
      },
      body,
    });
    expect(res.status).toBe(204);
    return lines[0]!;
  } finally {
    await receiver.stop();
  }
}

const object = { allocation_id: "31337:0xa16e02e87b7454126e5e10d957a927a7f5b5d2be:7", status: "ACTIVE" };
const renewal = {
  due_at: "2026-12-01T10:00:00.000Z",
  outlook: "at_risk",
  reason: "InsufficientBalance",
  amount: "9990000",
  currency: "USDC",
  token_decimals: 6,
  shortfall: "5790000",
};

describe("the demo receiver prints renewal events", () => {
  test("at_risk, recovered and upcoming, each with what it says", async () => {
    expect(
      await lineFor({
        id: "evt_a1",
        type: "subscription.renewal_at_risk",
        data: { object, renewal, previous_renewal: null },
      }),
    ).toBe(
      "webhook ← subscription.renewal_at_risk evt_a1 (signature ok): subscription 7, at risk: InsufficientBalance, " +
        "short 5.79 USDC, due 2026-12-01T10:00:00.000Z",
    );
    const recovered = { ...renewal, outlook: "will_renew", reason: null, shortfall: "0" };
    expect(
      await lineFor({ id: "evt_b2", type: "subscription.renewal_recovered", data: { object, renewal: recovered } }),
    ).toBe(
      "webhook ← subscription.renewal_recovered evt_b2 (signature ok): subscription 7, will renew, due 2026-12-01T10:00:00.000Z",
    );
    expect(
      await lineFor({
        id: "evt_c3",
        type: "subscription.renewal_upcoming",
        data: { object, due_at: "2026-12-01T10:00:00.000Z", amount: "9990000", currency: "USDC", token_decimals: 6 },
      }),
    ).toBe(
      "webhook ← subscription.renewal_upcoming evt_c3 (signature ok): subscription 7, 9.99 USDC due 2026-12-01T10:00:00.000Z",
    );
  });
});
