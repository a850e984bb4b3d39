/**
 * Packaging: `npm pack` runs each package's prepack build (ES modules and a CommonJS build, with declarations),
 * and the two tarballs install into fresh Node 20 projects — ES modules and CommonJS, without any framework and
 * with express, hono and elysia — where the consumer's code type-checks with `skipLibCheck: false` (TypeScript 5,
 * the repository's `typescript5`) and runs against the real API on a real local port: the typed client, the
 * gate's check and cache, a gated route's 200 and 402 (with the plans' payment options) in each framework, and the
 * gate's webhook endpoint.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { startSeededApp, type SeededApp } from "../../testkit/app";
import { MOD, W } from "../../testkit/seed";

const ROOT = join(import.meta.dir, "..", "..");
const TSC5 = join(ROOT, "node_modules", "typescript5", "bin", "tsc");
/** The framework versions the repository tests with, and the peers elysia needs. */
const FRAMEWORKS = [
  "express@5.3.0",
  "@types/express@5.0.6",
  "hono@4.13.19",
  "elysia@1.4.30",
  "@sinclair/typebox@0.34.52",
  "exact-mirror@0.2.7",
  "file-type@22.3.0",
  "openapi-types@12.1.3",
];

let work: string;
let tarballs: string[] = [];
/** Each package's packed file list. */
const packed = new Map<string, string[]>();

/** Runs a command, throwing with its output when it fails. */
async function run(cmd: string[], cwd: string): Promise<string> {
  const p = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, npm_config_fund: "false" } });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}:\n${out}\n${err}`);
  return out;
}

/** A fresh project of `type` with the tarballs (and `extra` packages) installed and `files` written. */
async function project(name: string, type: "module" | "commonjs", extra: string[], files: Record<string, string>) {
  const dir = join(work, name);
  mkdirSync(dir, { recursive: true });
  writeFileSync(join(dir, "package.json"), JSON.stringify({ name, private: true, type }));
  // Peers are installed only when listed: a project without a framework gets none of them.
  await run(
    ["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", "--legacy-peer-deps", ...tarballs, ...extra],
    dir,
  );
  for (const [file, text] of Object.entries(files)) writeFileSync(join(dir, file), text);
  return dir;
}

/**
 * Runs `node main.js <api url> …args` in `dir` against the seeded API, started only now: installs and type-checks
 * load the machine, and the API's queries have deadlines.
 */
async function runMain(dir: string, args: string[], after?: (seeded: SeededApp) => Promise<unknown>) {
  const seeded = await startSeededApp();
  try {
    seeded.app.listen({ port: 0, hostname: "127.0.0.1" });
    const out = await run(["node", "main.js", `http://127.0.0.1:${seeded.app.server!.port}`, ...args], dir);
    return { out: JSON.parse(out), after: await after?.(seeded) };
  } finally {
    seeded.app.server?.stop(true);
    await seeded.close();
  }
}

/** A strict NodeNext tsconfig over `files`, checking every declaration file (no skipLibCheck). */
const tsconfig = (files: string[], types?: string[]) =>
  JSON.stringify({
    compilerOptions: {
      module: "nodenext",
      moduleResolution: "nodenext",
      target: "es2022",
      strict: true,
      noEmit: true,
      skipLibCheck: false,
      lib: ["es2022", "dom", "dom.iterable"],
      ...(types ? { types } : {}),
    },
    files,
  });

/**
 * Type-checks a project with TypeScript 5 (emitting its JavaScript to `out/`); then each wrong use in `file`
 * (`from` → `to`) must be an error of its own.
 */
async function typecheck(dir: string, file: string, wrong: [from: string, to: string][], config = "tsconfig.json") {
  await run(["node", TSC5, "-p", config, "--noEmit", "false", "--outDir", "out"], dir);
  const text = readFileSync(join(dir, file), "utf8");
  let broken = text;
  for (const [from, to] of wrong) {
    expect(broken).toContain(from);
    broken = broken.replace(from, to);
  }
  writeFileSync(join(dir, file), broken);
  const failed = await run(["node", TSC5, "-p", config], dir).then(
    () => "",
    (err: Error) => err.message,
  );
  writeFileSync(join(dir, file), text);
  const errors = failed.split("\n").filter((l) => l.startsWith(`${file}(`));
  expect(errors.length).toBe(wrong.length);
  for (const e of errors) expect(e).toMatch(/not assignable/);
}

beforeAll(async () => {
  work = mkdtempSync(join(tmpdir(), "sdk-pack-"));
  for (const name of ["client", "gate"]) {
    const dir = join(ROOT, "packages", name);
    rmSync(join(dir, "dist"), { recursive: true, force: true });
    // No build beforehand: `npm pack` runs the package's prepack.
    const [out] = JSON.parse(await run(["npm", "pack", "--json", "--pack-destination", work], dir)) as {
      filename: string;
      files: { path: string }[];
    }[];
    packed.set(name, out!.files.map((f) => f.path).sort());
    tarballs.push(join(work, out!.filename));
  }
}, 120_000);

afterAll(async () => {
  if (work) rmSync(work, { recursive: true, force: true });
});

/** The 402 every project must see for bob (no subscription to plan 1 of module a1). */
const refusedBody = {
  error: "subscription_required",
  message: "an active subscription to one of these plans is required",
  wallet: W.bob,
  module: MOD.a1,
  plans: ["1"],
  accepts: [
    {
      scheme: "subscription",
      network: "eip155:31337",
      chain_id: 31337,
      module: MOD.a1,
      plan_id: "1",
      asset: "0x00000000000000000000000000000000000c0de6",
      symbol: "USDC",
      decimals: 6,
      amount: "10000000",
      interval_s: 30 * 86_400,
    },
  ],
};

test("npm pack: both packages build for import and require, with declarations, README and LICENSE", async () => {
  const node = (await run(["node", "--version"], ROOT)).trim();
  expect(node).toMatch(/^v(2\d|[3-9]\d)\./);
  for (const [name, files] of packed) {
    for (const f of ["dist/esm/index.js", "dist/esm/index.d.ts", "dist/cjs/index.js", "dist/cjs/index.d.ts"]) {
      expect(files).toContain(f);
    }
    expect(files).toContain("dist/cjs/package.json");
    expect(files).toContain("README.md");
    expect(files).toContain("LICENSE");
    expect(files.filter((f) => f.startsWith("src/"))).toEqual([]);
    const manifest = JSON.parse(readFileSync(join(ROOT, "packages", name, "package.json"), "utf8"));
    expect(manifest.publishConfig).toEqual({ access: "public" });
    expect(manifest.scripts.prepack).toBeDefined();
    expect(manifest.exports["."].require.default).toBe("./dist/cjs/index.js");
    expect(manifest.exports["."].import.default).toBe("./dist/esm/index.js");
  }
});

test("ES modules, no framework: type-checks without skipLibCheck and runs a gated route", async () => {
  const secret = "whsec_" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64");
  const event = JSON.stringify({
    id: "evt_1",
    type: "subscription.status_changed",
    block_number: "1",
    data: { object: { user_address: W.alice } },
  });
  const ts = new Date();
  const headers = {
    "webhook-id": "evt_1",
    "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign("evt_1", ts, event),
  };
  const dir = await project("esm-bare", "module", [], {
    "main.js": `
import { ApiError, createClient } from "@subscription-indexer/client";
import { createGate } from "@subscription-indexer/gate";
const [url, module, alice, bob, secret, event, headers] = process.argv.slice(2);
const api = createClient({ baseUrl: url });
const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: module, wallet: alice, plan_ids: "1" } } });
const error = await api.GET("/v0/activity/{merchant}", { params: { path: { merchant: bob } } }).catch((e) => e);
const gate = createGate({ baseUrl: url, module, plans: [1] });
await gate.ready();
const first = await gate.check(alice);
const second = await gate.check(alice);
const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, (req, s) => Response.json(s));
const passed = await premium(new Request("http://app/premium", { headers: { "x-wallet": alice } }));
const refused = await premium(new Request("http://app/premium", { headers: { "x-wallet": bob } }));
const hook = await gate.webhooks({ secret }).fetch(
  new Request("http://app/hooks", { method: "POST", body: event, headers: JSON.parse(headers) }),
);
const third = await gate.check(alice);
console.log(JSON.stringify({
  check: { authorized: data.authorized, valid_until: data.indexed.valid_until },
  error: { isApiError: error instanceof ApiError, status: error.status, code: error.code },
  sources: [first.source, second.source, third.source],
  passed: passed.status,
  refused: { status: refused.status, body: await refused.json() },
  hook: hook.status,
}));
`,
    "typed.ts": `
import { ApiError, createClient } from "@subscription-indexer/client";
import { createGate, memoryStore, type CheckResult, type GateStore, type PaymentRequiredBody } from "@subscription-indexer/gate";
const api = createClient({ baseUrl: "http://localhost:3000" });
const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: "0x", wallet: "0x", plan_ids: "1" } } });
const until: string | null | undefined = data?.indexed?.valid_until;
const store: GateStore = memoryStore();
const gate = createGate({ baseUrl: "http://localhost:3000", module: "0x", plans: [1], store, maxAgeMs: 30_000 });
const r: CheckResult = await gate.check("0x");
const body: PaymentRequiredBody | undefined = undefined;
const e: ApiError | undefined = undefined;
export { until, r, e, body };
`,
    "tsconfig.json": tsconfig(["typed.ts"], []),
  });
  await typecheck(dir, "typed.ts", [["string | null | undefined", "number | undefined"]]);
  const { out, after: validUntil } = await runMain(
    dir,
    [MOD.a1, W.alice, W.bob, secret, event, JSON.stringify(headers)],
    async (seeded) =>
      (await seeded.get(`/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`, {})).body.indexed
        .valid_until,
  );
  expect(out).toEqual({
    check: { authorized: true, valid_until: validUntil },
    error: { isApiError: true, status: 401, code: "unauthenticated" },
    sources: ["api", "cache", "api"],
    passed: 200,
    refused: { status: 402, body: refusedBody },
    hook: 200,
  });
}, 180_000);

test("CommonJS, no framework: require() gets the CommonJS build, typed, and a gated route runs", async () => {
  const dir = await project("cjs-bare", "commonjs", [], {
    "main.js": `
const { createClient } = require("@subscription-indexer/client");
const { createGate, GateUnavailableError } = require("@subscription-indexer/gate");
const [url, mod, alice, bob] = process.argv.slice(2);
(async () => {
  const api = createClient({ baseUrl: url });
  const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: mod, wallet: alice, plan_ids: "1" } } });
  const gate = createGate({ baseUrl: url, module: mod, plans: [1] });
  const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, (req, s) => Response.json(s));
  const passed = await premium(new Request("http://app/premium", { headers: { "x-wallet": alice } }));
  const refused = await premium(new Request("http://app/premium", { headers: { "x-wallet": bob } }));
  console.log(JSON.stringify({
    authorized: data.authorized,
    passed: { status: passed.status, authorized: (await passed.json()).authorized },
    refused: { status: refused.status, body: await refused.json() },
    cjs: typeof GateUnavailableError === "function" && !("default" in require("@subscription-indexer/gate")),
  }));
})();
`,
    "typed.ts": `
import { createGate, type CheckResult } from "@subscription-indexer/gate";
import { createClient } from "@subscription-indexer/client";
export async function main(): Promise<CheckResult> {
  const api = createClient({ baseUrl: "http://localhost:3000" });
  const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: "0x", wallet: "0x", plan_ids: "1" } } });
  const ok: boolean | undefined = data?.authorized;
  void ok;
  return createGate({ baseUrl: "http://localhost:3000", module: "0x", plans: [1] }).check("0x");
}
`,
    "tsconfig.json": tsconfig(["typed.ts"], []),
  });
  await typecheck(dir, "typed.ts", [["boolean | undefined", "string | undefined"]]);
  const { out } = await runMain(dir, [MOD.a1, W.alice, W.bob]);
  expect(out).toEqual({
    authorized: true,
    passed: { status: 200, authorized: true },
    refused: { status: 402, body: refusedBody },
    cjs: true,
  });
}, 180_000);

/** The consumer code of the framework projects: express and hono, each with a gated route. */
const FRAMEWORK_TYPED = `
import express from "express";
import { Hono } from "hono";
import { createGate, type CheckResult, type GateVariables } from "@subscription-indexer/gate";
export function apps(url: string, module: string) {
  const gate = createGate({ baseUrl: url, module, plans: [1] });
  const ex = express();
  ex.get("/premium", gate.express({ wallet: (req) => req.get("x-wallet") }), (req, res) => {
    const s: CheckResult | undefined = req.subscription;
    res.json(s);
  });
  const hono = new Hono<{ Variables: GateVariables }>();
  hono.use("/premium", gate.hono({ wallet: (c) => c.req.header("x-wallet") }));
  hono.get("/premium", (c) => {
    const s: CheckResult = c.get("subscription");
    return c.json(s);
  });
  return { ex, hono, gate };
}
`;

/** Elysia's gated route (its own declarations need bun's types and skipLibCheck: checked apart). */
const ELYSIA_TYPED = `
import { Elysia } from "elysia";
import type { CheckResult, Gate } from "@subscription-indexer/gate";
import { gatePlugin } from "@subscription-indexer/gate/elysia";
export function ely(gate: Gate) {
  return new Elysia()
    .use(gatePlugin(gate, { wallet: ({ request }) => request.headers.get("x-wallet") }))
    .get("/premium", ({ subscription }) => {
      const s: CheckResult = subscription;
      return s;
    });
}
`;

/** Runs the three apps of FRAMEWORK_TYPED (compiled by the test as plain JS) and prints what each answered. */
const frameworkMain = (load: string) => `
${load}
const [url, mod, alice, bob] = process.argv.slice(2);
(async () => {
  const { ex, hono, gate } = apps(url, mod);
  const app = ely(gate);
  const server = await new Promise((resolve) => { const s = ex.listen(0, "127.0.0.1", () => resolve(s)); });
  const base = "http://127.0.0.1:" + server.address().port;
  const out = {};
  for (const [name, ask] of [
    ["express", (w) => fetch(base + "/premium", { headers: { "x-wallet": w } })],
    ["hono", (w) => hono.request("/premium", { headers: { "x-wallet": w } })],
    ["elysia", (w) => app.handle(new Request("http://localhost/premium", { headers: { "x-wallet": w } }))],
  ]) {
    const ok = await ask(alice);
    const no = await ask(bob);
    out[name] = [ok.status, (await ok.json()).authorized, no.status, (await no.json()).error];
  }
  server.close();
  console.log(JSON.stringify(out));
})();
`;

for (const type of ["module", "commonjs"] as const) {
  test(`${type === "module" ? "ES modules" : "CommonJS"} with express, hono and elysia: typed context, gated routes`, async () => {
    const dir = await project(`frameworks-${type}`, type, FRAMEWORKS, {
      "typed.ts": FRAMEWORK_TYPED,
      "typed-elysia.ts": ELYSIA_TYPED,
      // express and hono with every declaration checked; elysia's own need skipLibCheck (ours are checked above).
      "tsconfig.json": tsconfig(["typed.ts"]),
      "tsconfig.elysia.json": JSON.stringify({
        extends: "./tsconfig.json",
        compilerOptions: { skipLibCheck: true },
        files: ["typed-elysia.ts"],
      }),
    });
    await typecheck(dir, "typed.ts", [
      ["const s: CheckResult | undefined = req.subscription", "const s: number = req.subscription"],
      ['const s: CheckResult = c.get("subscription")', 'const s: string = c.get("subscription")'],
    ]);
    await typecheck(
      dir,
      "typed-elysia.ts",
      [["const s: CheckResult = subscription", "const s: string = subscription"]],
      "tsconfig.elysia.json",
    );
    const load =
      type === "module"
        ? 'import { apps } from "./out/typed.js";\nimport { ely } from "./out/typed-elysia.js";'
        : 'const { apps } = require("./out/typed.js");\nconst { ely } = require("./out/typed-elysia.js");';
    writeFileSync(join(dir, "main.js"), frameworkMain(load));
    const { out } = await runMain(dir, [MOD.a1, W.alice, W.bob]);
    const expected = [200, true, 402, "subscription_required"];
    expect(out).toEqual({ express: expected, hono: expected, elysia: expected });
  }, 240_000);
}
