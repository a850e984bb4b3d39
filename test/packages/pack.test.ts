/**
 * Packaging: each package builds with tsc, `npm pack` gives a tarball of `dist/` (with declarations), README and
 * package.json, and the two tarballs install into a fresh Node 20 project (`npm install <tgz>`; their dependencies
 * from the registry) where a Node script imports them and calls the real API on a real local port: the typed
 * client's answer and ApiError, the gate's check and cache, its fetch adapter's 402 and its webhook endpoint.
 */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { Webhook } from "standardwebhooks";
import { startSeededApp, type SeededApp } from "../../testkit/app";
import { MOD, W } from "../../testkit/seed";

const ROOT = join(import.meta.dir, "..", "..");
const PACKAGES = ["client", "gate"] as const;

let seeded: SeededApp;
let url: string;
let work: string;

/** Runs a command, throwing with its output when it fails. */
async function run(cmd: string[], cwd: string): Promise<string> {
  const p = Bun.spawn(cmd, { cwd, stdout: "pipe", stderr: "pipe", env: { ...process.env, npm_config_fund: "false" } });
  const [out, err, code] = await Promise.all([new Response(p.stdout).text(), new Response(p.stderr).text(), p.exited]);
  if (code !== 0) throw new Error(`${cmd.join(" ")} exited ${code}:\n${out}\n${err}`);
  return out;
}

beforeAll(async () => {
  seeded = await startSeededApp();
  seeded.app.listen({ port: 0, hostname: "127.0.0.1" });
  url = `http://127.0.0.1:${seeded.app.server!.port}`;
  work = mkdtempSync(join(tmpdir(), "sdk-pack-"));
}, 60_000);

afterAll(async () => {
  seeded?.app.server?.stop(true);
  await seeded?.close();
  if (work) rmSync(work, { recursive: true, force: true });
});

test("npm pack: the tarballs install and run in a fresh Node 20 project", async () => {
  const node = (await run(["node", "--version"], ROOT)).trim();
  expect(node).toMatch(/^v(2\d|[3-9]\d)\./);
  const tarballs: string[] = [];
  for (const name of PACKAGES) {
    const dir = join(ROOT, "packages", name);
    await run([join(ROOT, "node_modules", ".bin", "tsc"), "-p", "tsconfig.json"], dir);
    const [packed] = JSON.parse(await run(["npm", "pack", "--json", "--pack-destination", work], dir)) as {
      filename: string;
      files: { path: string }[];
    }[];
    const files = packed!.files.map((f) => f.path).sort();
    expect(files).toContain("dist/index.js");
    expect(files).toContain("dist/index.d.ts");
    expect(files).toContain("README.md");
    expect(files.filter((f) => f.startsWith("src/"))).toEqual([]);
    tarballs.push(join(work, packed!.filename));
  }

  const project = join(work, "app");
  await run(["mkdir", "-p", project], work);
  writeFileSync(join(project, "package.json"), JSON.stringify({ name: "app", private: true, type: "module" }));
  await run(["npm", "install", "--no-audit", "--no-fund", "--prefer-offline", ...tarballs], project);

  const secret = "whsec_" + Buffer.from(crypto.getRandomValues(new Uint8Array(32))).toString("base64");
  const event = JSON.stringify({
    id: "evt_1",
    type: "subscription.status_changed",
    data: { object: { user_address: W.alice } },
  });
  const ts = new Date();
  const headers = {
    "webhook-id": "evt_1",
    "webhook-timestamp": String(Math.floor(ts.getTime() / 1000)),
    "webhook-signature": new Webhook(secret).sign("evt_1", ts, event),
  };
  writeFileSync(
    join(project, "main.js"),
    `
import { ApiError, createClient } from "@subscription-indexer/client";
import { createGate } from "@subscription-indexer/gate";
const [url, module, alice, bob, secret, event, headers] = process.argv.slice(2);
const api = createClient({ baseUrl: url });
const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: module, wallet: alice, plan_ids: "1" } } });
const error = await api.GET("/v0/activity/{merchant}", { params: { path: { merchant: bob } } }).catch((e) => e);
const gate = createGate({ baseUrl: url, module, plans: [1] });
const first = await gate.check(alice);
const second = await gate.check(alice);
const premium = gate.fetch({ wallet: (req) => req.headers.get("x-wallet") }, (req, s) => Response.json(s));
const refused = await premium(new Request("http://app/premium", { headers: { "x-wallet": bob } }));
const hook = await gate.webhooks({ secret }).fetch(
  new Request("http://app/hooks", { method: "POST", body: event, headers: JSON.parse(headers) }),
);
const third = await gate.check(alice);
console.log(JSON.stringify({
  check: { authorized: data.authorized, valid_until: data.indexed.valid_until },
  error: { isApiError: error instanceof ApiError, status: error.status, code: error.code },
  sources: [first.source, second.source, third.source],
  validUntil: first.validUntil.toISOString(),
  refused: { status: refused.status, body: await refused.json() },
  hook: hook.status,
}));
`,
  );
  const out = await run(
    ["node", "main.js", url, MOD.a1, W.alice, W.bob, secret, event, JSON.stringify(headers)],
    project,
  );
  const result = JSON.parse(out);

  // The published declarations resolve through `exports` and type a consumer's code (NodeNext, strict).
  writeFileSync(
    join(project, "typed.ts"),
    `
import { ApiError, createClient } from "@subscription-indexer/client";
import { createGate, type CheckResult } from "@subscription-indexer/gate";
const api = createClient({ baseUrl: "http://localhost:3000" });
const { data } = await api.GET("/v0/auth/check", { params: { query: { module_address: "0x", wallet: "0x", plan_ids: "1" } } });
const until: string | null | undefined = data?.indexed?.valid_until;
const gate = createGate({ baseUrl: "http://localhost:3000", module: "0x", plans: [1] });
const r: CheckResult = await gate.check("0x");
const e: ApiError | undefined = undefined;
export { until, r, e };
`,
  );
  writeFileSync(
    join(project, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: {
        module: "nodenext",
        moduleResolution: "nodenext",
        target: "es2022",
        strict: true,
        noEmit: true,
        skipLibCheck: true,
        lib: ["es2022", "dom"],
        types: [],
      },
      files: ["typed.ts"],
    }),
  );
  await run([join(ROOT, "node_modules", ".bin", "tsc"), "-p", "tsconfig.json"], project);
  // And a wrong use is an error: the generated types know valid_until is a string or null.
  writeFileSync(
    join(project, "typed.ts"),
    readFileSync(join(project, "typed.ts"), "utf8").replace("string | null | undefined", "number | undefined"),
  );
  await expect(run([join(ROOT, "node_modules", ".bin", "tsc"), "-p", "tsconfig.json"], project)).rejects.toThrow(
    /valid_until|not assignable/,
  );

  const validUntil = (await seeded.get(`/v0/auth/check?module_address=${MOD.a1}&wallet=${W.alice}&plan_ids=1`, {})).body
    .indexed.valid_until;
  expect(result).toEqual({
    check: { authorized: true, valid_until: validUntil },
    error: { isApiError: true, status: 401, code: "unauthenticated" },
    sources: ["api", "cache", "api"],
    validUntil,
    refused: {
      status: 402,
      body: {
        error: "subscription_required",
        message: "an active subscription to one of these plans is required",
        wallet: W.bob,
        module: MOD.a1,
        plans: ["1"],
      },
    },
    hook: 200,
  });
}, 120_000);
