/**
 * Every `curl` example of docs/api.md runs, with the real curl, against the development demo (`bun run dev`), and
 * its answer has the documented shape: the JSON block that follows the example. Placeholders come from the demo's
 * banner (`API`, `KEY`, `MERCHANT`), a SIWE sign-in of the demo merchant (`SESSION`) and the endpoint the
 * webhook example creates (`ENDPOINT`).
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort, spawnBun, type Child } from "../../testkit/cli";
import { accounts } from "../../testkit/accounts";
import { siweMessage } from "../../testkit/siwe";

const root = join(import.meta.dir, "..", "..");

/** A curl example, the line it starts on, and the JSON documented as its answer (null when none follows). */
export type Example = { line: number; command: string; documented: string | null };

/** The curl examples of a markdown text: each sh block's curl commands, and the json block right after it. */
export function examplesOf(text: string): Example[] {
  const lines = text.split("\n");
  const blocks: { lang: string; line: number; body: string[]; end: number }[] = [];
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i]!.match(/^```(\w*)\s*$/);
    if (!open) continue;
    let j = i + 1;
    while (j < lines.length && !/^```\s*$/.test(lines[j]!)) j++;
    blocks.push({ lang: open[1]!, line: i + 2, body: lines.slice(i + 1, j), end: j });
    i = j;
  }
  const out: Example[] = [];
  blocks.forEach((b, k) => {
    if (b.lang !== "sh" && b.lang !== "bash") return;
    const commands: { line: number; command: string }[] = [];
    for (let i = 0; i < b.body.length; i++) {
      if (!b.body[i]!.startsWith("curl ")) continue;
      let command = b.body[i]!;
      const line = b.line + i;
      while (command.endsWith("\\") && i + 1 < b.body.length) command = command.slice(0, -1) + b.body[++i]!.trim();
      commands.push({ line, command });
    }
    const next = blocks[k + 1];
    const between = next
      ? lines
          .slice(b.end + 1, next.line - 2)
          .join("")
          .trim()
      : "x";
    const documented = next && next.lang === "json" && between === "" ? next.body.join("\n") : null;
    commands.forEach((c, i) => out.push({ ...c, documented: i === commands.length - 1 ? documented : null }));
  });
  return out;
}

/** Parses documented JSON whose elisions (`, …` before a closing bracket) stand for more fields or items. */
export function parseDocumented(text: string): unknown {
  return JSON.parse(text.replace(/,\s*…\s*(?=[}\]])/g, ""));
}

/** Where `actual` departs from the shape of `documented`: same kinds, every documented field present. */
export function shapeDiff(documented: unknown, actual: unknown, path = "$"): string[] {
  if (documented === null) return [];
  if (Array.isArray(documented)) {
    if (!Array.isArray(actual)) return [`${path}: expected an array, got ${JSON.stringify(actual)?.slice(0, 80)}`];
    if (documented.length === 0) return [];
    if (actual.length === 0) return [`${path}: expected items, got an empty array`];
    return shapeDiff(documented[0], actual[0], `${path}[0]`);
  }
  if (typeof documented === "object") {
    if (actual === null || typeof actual !== "object" || Array.isArray(actual)) {
      return [`${path}: expected an object, got ${JSON.stringify(actual)?.slice(0, 80)}`];
    }
    return Object.entries(documented as Record<string, unknown>).flatMap(([k, v]) =>
      k in (actual as object)
        ? shapeDiff(v, (actual as Record<string, unknown>)[k], `${path}.${k}`)
        : [`${path}.${k}: missing`],
    );
  }
  if (actual === null) return [];
  return typeof actual === typeof documented ? [] : [`${path}: expected a ${typeof documented}, got ${typeof actual}`];
}

test("examples are found with their continuation lines and the json block that follows", () => {
  const text = [
    "```sh",
    'curl -s -X POST -H "a: b" \\',
    '  "$API/x"',
    "```",
    "",
    "```json",
    '{"a": 1, "b": [{"c": "d"}, …]}',
    "```",
    "```sh",
    'curl -s "$API/y"',
    "```",
    "Prose between.",
    "```json",
    "{}",
    "```",
  ].join("\n");
  expect(examplesOf(text)).toEqual([
    { line: 2, command: 'curl -s -X POST -H "a: b" "$API/x"', documented: '{"a": 1, "b": [{"c": "d"}, …]}' },
    { line: 10, command: 'curl -s "$API/y"', documented: null },
  ]);
  expect(parseDocumented('{"a": 1, "b": [{"c": "d"}, …], "e": {"f": 1, …}}')).toEqual({
    a: 1,
    b: [{ c: "d" }],
    e: { f: 1 },
  });
});

test("the shape check names a missing field, a wrong kind and an empty list", () => {
  const doc = { a: "x", b: [{ c: 1 }], d: null, e: { f: true } };
  expect(shapeDiff(doc, { a: "y", b: [{ c: 2, z: 0 }], d: 5, e: { f: false }, g: 1 })).toEqual([]);
  expect(shapeDiff(doc, { a: 1, b: [], e: {} })).toEqual([
    "$.a: expected a string, got number",
    "$.b: expected items, got an empty array",
    "$.d: missing",
    "$.e.f: missing",
  ]);
});

let dataDir: string;
let child: Child | undefined;
let env: Record<string, string> = {};

beforeAll(async () => {
  dataDir = mkdtempSync(join(tmpdir(), "api-examples-"));
  const apiPort = await freePort();
  child = spawnBun(["src/cli/dev.ts", "--anvil-port", String(await freePort())], {
    PORT: String(apiPort),
    DEV_DATA_DIR: dataDir,
  });
  const [, key] = await child.waitFor(/^API key: (\S+)$/m, 90_000);
  const out = child.output();
  const api = out.match(/^API: (\S+)$/m)![1]!;
  const merchant = out.match(/^Merchant: (0x[0-9a-f]{40})$/m)![1]!;
  // The demo merchant is anvil's account #1 (testkit's `merchant`): sign in as it for the session examples.
  expect(merchant).toBe(accounts.merchant.address.toLowerCase());
  const { nonce } = (await (await fetch(`${api}/v0/siwe/nonce`)).json()) as { nonce: string };
  const message = siweMessage({ nonce, address: accounts.merchant.address, domain: new URL(api).host });
  const signature = await accounts.merchant.signMessage({ message });
  const verify = await fetch(`${api}/v0/siwe/verify`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message, signature }),
  });
  expect(verify.status).toBe(200);
  const { token } = (await verify.json()) as { token: string };
  env = { API: api, KEY: key!, MERCHANT: merchant, SESSION: token };
}, 120_000);

afterAll(async () => {
  child?.proc.kill("SIGINT");
  await child?.exited;
  rmSync(dataDir, { recursive: true, force: true });
}, 60_000);

/** Runs one example with the real curl and the placeholders in its environment: status and parsed body. */
async function run(command: string): Promise<{ status: number; body: unknown; text: string }> {
  const proc = Bun.spawn(["sh", "-c", `${command} -w '\\n%{http_code}'`], {
    env: { PATH: process.env.PATH ?? "", ...env },
    stdout: "pipe",
    stderr: "pipe",
  });
  const [out, code] = await Promise.all([new Response(proc.stdout).text(), proc.exited]);
  expect(code).toBe(0);
  const cut = out.lastIndexOf("\n");
  const text = out.slice(0, cut);
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the shape check reports it
  }
  return { status: Number(out.slice(cut + 1)), body, text };
}

test("every curl example of docs/api.md answers 2xx with the documented shape", async () => {
  const examples = examplesOf(readFileSync(join(root, "docs", "api.md"), "utf8"));
  expect(examples.length).toBeGreaterThanOrEqual(12);
  const problems: string[] = [];
  for (const ex of examples) {
    if (ex.documented === null) {
      problems.push(`docs/api.md:${ex.line}: no json block documents this example's answer`);
      continue;
    }
    const documented = parseDocumented(ex.documented);
    // An answer may lag the demo by a poll (a replay's deliveries, a fresh outlook): retry briefly before judging.
    let last = await run(ex.command);
    for (let i = 0; i < 40 && shapeDiff(documented, last.body).length > 0 && last.status < 300; i++) {
      await Bun.sleep(500);
      last = await run(ex.command);
    }
    if (last.status < 200 || last.status >= 300) {
      problems.push(`docs/api.md:${ex.line}: HTTP ${last.status} ${last.text.slice(0, 200)}`);
    } else {
      for (const d of shapeDiff(documented, last.body)) problems.push(`docs/api.md:${ex.line}: ${d}`);
    }
    // The webhook examples after the first name the endpoint it created.
    const id = (last.body as { id?: unknown } | null)?.id;
    if (typeof id === "string" && id.startsWith("we_")) env.ENDPOINT = id;
  }
  expect(problems).toEqual([]);
}, 180_000);
