import { describe, expect, test } from "bun:test";
import { eventsCopyText } from "../../src/events/queries";
import type { NewEvent } from "../../src/events/timeline";

/** What a reader of COPY's text format reads back: one row per line, fields split on tabs, escapes undone. */
const parseCopy = (text: string) =>
  text
    .split("\n")
    .slice(0, -1)
    .map((line) =>
      line.split("\t").map((f) => f.replace(/\\(.)/g, (_, c: string) => ({ t: "\t", n: "\n", r: "\r" })[c] ?? c)),
    );

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
      ]),
    );
  });
});
