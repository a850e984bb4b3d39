import { describe, expect, test } from "bun:test";
import { eventsCopyText } from "../../src/events/queries";
import { expiryEvent, type NewEvent } from "../../src/events/timeline";
import type { SubState } from "../../src/domain/subscription";

/** What a reader of COPY's text format reads back: one row per line, fields split on tabs, escapes undone, \N null. */
const parseCopy = (text: string) =>
  text
    .split("\n")
    .slice(0, -1)
    .map((line) =>
      line
        .split("\t")
        .map((f) =>
          f === "\\N" ? null : f.replace(/\\(.)/g, (_, c: string) => ({ t: "\t", n: "\n", r: "\r" })[c] ?? c),
        ),
    );

/** No snapshot: the fifteen snapshot columns are null. */
const NO_SNAPSHOT = Array<null>(15).fill(null);

describe("the COPY text of a batch's events", () => {
  const event = (seq: bigint, ts: number, data: Record<string, unknown>): NewEvent => ({
    id: `evt_${seq.toString(16).padStart(40, "0")}`,
    merchant: "0x00000000000000000000000000000000000000bb",
    type: "subscription.status_changed",
    blockNumber: 12n,
    logIndex: 3,
    subIndex: 1,
    ts,
    data,
    seq,
  });

  test("each event is one row: its fields, its instant in ISO form, its data as JSON, escaped", () => {
    const events = [
      event(268435457n, 1_700_000_000, { object: { id: "a\\b" }, previous_status: "ACTIVE" }),
      event(268435458n, 1_700_000_000, { object: { id: "tab\there" }, previous_status: null }),
      event(268435459n, 1_700_000_001, { object: { id: "line\nbreak\r" } }),
      event(268435460n, 1_700_000_000, { object: {} }),
    ];
    const rows = parseCopy(eventsCopyText(31337, events));
    expect(rows).toEqual(
      events.map((e) => [
        String(e.seq),
        e.id,
        "31337",
        e.merchant,
        e.type,
        "12",
        "3",
        "1",
        new Date(e.ts * 1000).toISOString(),
        JSON.stringify(e.data),
        ...NO_SNAPSHOT,
      ]),
    );
  });

  test("a subscription event goes as its snapshot's columns, its data null (built when read)", () => {
    const state: SubState = {
      subscriptionId: "7",
      module: "0x00000000000000000000000000000000000000aa",
      merchant: "0x00000000000000000000000000000000000000bb",
      subscriber: "0x00000000000000000000000000000000000000cc",
      planId: "2",
      maxExecutions: "0",
      timesExecuted: 3,
      totalSpent: 30_000_000n,
      createdAt: 1_699_000_000,
      lastPaidAt: 1_699_500_000,
      nextChargeAt: 1_699_586_400,
      allowanceExpiry: "1800000000",
      paused: false,
      cancelled: true,
      blockNumber: 5n,
      logIndex: 0,
      txHash: "0x01",
    };
    const e = { ...expiryEvent(31337, state, true, 1_700_000_000, { number: 12n, hash: "0x02" }, -1), seq: 9n };
    const created = { ...e, seq: 10n, snapshot: { ...e.snapshot!, previous: undefined } };
    const [row, createdRow] = parseCopy(eventsCopyText(31337, [e, created]));
    expect(createdRow!.slice(9)).toEqual([null, ...row!.slice(10, -1), null]);
    expect(row).toEqual([
      "9",
      e.id,
      "31337",
      state.merchant,
      "subscription.status_changed",
      "12",
      "-1",
      "0",
      new Date(1_700_000_000_000).toISOString(),
      null,
      "7",
      state.module,
      state.subscriber,
      "2",
      "0",
      "1699000000",
      "3",
      "30000000",
      "1699586400",
      "1800000000",
      "f",
      "t",
      "t",
      "EXPIRED",
      "ACTIVE",
    ]);
  });
});
