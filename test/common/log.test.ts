import { describe, expect, test } from "bun:test";
import { createLogger, maskInLogs, prettyLine, resolveLogFormat, type LogFormat } from "../../src/common/log";
import { newSecret } from "../../src/webhooks/secrets";
import { randomSecret } from "../../src/auth/hash";
import { loadConfig } from "../../src/common/config";
import { freePort, spawnBun } from "../../testkit/cli";

/** Every line a logger of `format` writes for the given records. */
function lines(format: LogFormat, records: [string, Record<string, unknown>][]): string[] {
  const out: string[] = [];
  const log = createLogger("debug", (l) => out.push(l), format);
  for (const [msg, fields] of records) log("warn", msg, fields);
  return out;
}

/** The `k=v` fields of a pretty line (colours stripped), values parsed back like JSON where they are quoted. */
function prettyFields(line: string): Record<string, unknown> {
  const plain = line.replace(/\x1b\[[0-9;]*m/g, "");
  const out: Record<string, unknown> = {};
  for (const m of plain.matchAll(
    / ([A-Za-z_][\w]*)=("(?:[^"\\]|\\.)*"|\{.*?\}(?= [A-Za-z_]\w*=|$)|\[.*?\](?= [A-Za-z_]\w*=|$)|\S+)/g,
  )) {
    const raw = m[2]!;
    out[m[1]!] = /^["{[]/.test(raw) ? JSON.parse(raw) : raw;
  }
  return out;
}

const secretFields = {
  chainId: 8453,
  block: 123n,
  rpc: "https://user:hunter2secret@rpc.example.com/v1",
  privateKey: "0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d",
  header: "Bearer sk_live_5QwErTyUiOpAsDfGhJkL",
  nested: { apiKey: "sk_live_nestedNestedNested", ok: true },
  err: new Error("connect to postgres://app:pgpass99@db:5432/x failed"),
  note: "two words",
};

describe("log format", () => {
  test("pretty and JSON lines carry the same fields, values and message", () => {
    const records: [string, Record<string, unknown>][] = [
      ["indexer backfill", { chainId: 1, blocks: "4200", percent: 42, etaS: 180, syncing: true, none: null }],
      ["batch", secretFields],
      ["list", { roles: ["api", "indexer"], empty: "" }],
    ];
    const json = lines("json", records).map((l) => JSON.parse(l) as Record<string, unknown>);
    const pretty = lines("pretty", records);
    expect(pretty.length).toBe(json.length);
    for (let i = 0; i < json.length; i++) {
      const { time, level, msg, ...fields } = json[i]!;
      const line = pretty[i]!.replace(/\x1b\[[0-9;]*m/g, "");
      expect(line).toContain(` ${String(level).toUpperCase()} `);
      expect(line).toContain(` ${msg}`);
      expect(line).toMatch(/^\d\d:\d\d:\d\d\.\d{3} /);
      expect(time).toBeString();
      // Scalars come back as their text; strings, objects and arrays as JSON.
      const expected = Object.fromEntries(
        Object.entries(fields).map(([k, v]) => [
          k,
          typeof v === "string" || (typeof v === "object" && v !== null) ? v : String(v),
        ]),
      );
      expect(prettyFields(line)).toEqual(expected);
      expect(pretty[i]!.split("\n").length).toBe(1);
    }
  });

  test("secrets never appear in either form", () => {
    for (const format of ["json", "pretty"] as const) {
      const out = lines(format, [
        ["calling https://u:topsecretpw@node.example with Bearer sess_abcdefghijkl", secretFields],
      ]).join("\n");
      for (const secret of ["hunter2secret", "5QwErTyUiOpAsDfGhJkL", "nestedNestedNested", "pgpass99", "topsecretpw"]) {
        expect({ format, leaked: out.includes(secret) ? secret : null }).toEqual({ format, leaked: null });
      }
      expect(out).not.toContain(secretFields.privateKey.slice(2));
      expect(out).not.toContain("abcdefghijkl");
      expect(out).toContain("[redacted]");
    }
  });

  test("pretty lines are coloured by level; NO_COLOR-free text when colour is off", () => {
    const record = { time: "2026-11-26T10:00:01.042Z", level: "error" as const, msg: "boom", code: 7 };
    expect(prettyLine(record, true)).toContain("\x1b[31mERROR");
    expect(prettyLine(record, false)).toBe("10:00:01.042 ERROR boom code=7");
  });

  test("LOG_FORMAT: json or pretty; unset follows whether stdout is a terminal", () => {
    expect(loadConfig({ LOG_FORMAT: "pretty" }).LOG_FORMAT).toBe("pretty");
    expect(loadConfig({}).LOG_FORMAT).toBeUndefined();
    expect(() => loadConfig({ LOG_FORMAT: "yaml" })).toThrow(
      'LOG_FORMAT="yaml" is invalid: expected one of json, pretty',
    );
    expect(resolveLogFormat(undefined, true)).toBe("pretty");
    expect(resolveLogFormat(undefined, false)).toBe("json");
    expect(resolveLogFormat("json", true)).toBe("json");
  });
});

describe("bun start", () => {
  test("LOG_FORMAT=pretty: the start-up summary and every record as short lines, no secret", async () => {
    const port = await freePort();
    const admin = "admin-key-0123456789-abcdef";
    const child = spawnBun(["src/main.ts"], {
      ROLES: "api",
      DATA_DIR: "memory://",
      CHAIN_ID: "31337",
      SIWE_DOMAIN: "localhost",
      HOST: "127.0.0.1",
      PORT: String(port),
      ADMIN_API_KEY: admin,
      LOG_FORMAT: "pretty",
      NO_COLOR: "1",
    });
    try {
      await child.waitFor(/ INFO  service started /, 60_000);
      const out = child.output();
      expect(out).toMatch(
        new RegExp(
          `\\d\\d:\\d\\d:\\d\\d\\.\\d{3} INFO  api: http://127\\.0\\.0\\.1:${port} · docs .* role=api url=http://127\\.0\\.0\\.1:${port}`,
        ),
      );
      expect(out).not.toContain('{"time"');
      expect(out).not.toContain(admin);
    } finally {
      child.proc.kill("SIGTERM");
      await child.exited;
    }
  }, 90_000);
});

/** The lines a logger writes for `fields`, as text. */
function logged(msg: string, fields: Record<string, unknown>): string {
  const lines: string[] = [];
  createLogger("debug", (line) => lines.push(line))("info", msg, fields);
  return lines.join("\n");
}

test("webhook secrets, the control token and the admin key never reach a log line, in messages or values", () => {
  const whsec = newSecret();
  const control = randomSecret("ctl_");
  const admin = "an-admin-key-without-any-recognizable-shape";
  maskInLogs(admin);
  const text = logged(`sent with ${whsec} after ${control}`, {
    detail: `secret ${whsec} token ${control}`,
    nested: { url: `http://127.0.0.1:1/?admin=${admin}`, err: new Error(`bad ${admin} and ${whsec}`) },
  });
  for (const secret of [whsec, whsec.slice(6), control, control.slice(4), admin]) expect(text).not.toContain(secret);
  expect(text).toContain("whsec_***");
  expect(text).toContain("ctl_***");
  expect(text).toContain("?admin=***");
  // Ordinary text is left alone.
  expect(logged("indexed", { block: "12", note: "whsec_ is the prefix" })).toContain('"note":"whsec_ is the prefix"');
});
