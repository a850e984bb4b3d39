/**
 * The launcher every package script runs through (scripts/bun.sh): it sets the allocator's purge delay for the
 * process it execs, and JavaScriptCore's RAM size and heap growth for the service's entry points, unless the
 * environment already names them.
 */
import { afterAll, expect, test } from "bun:test";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { spawnCommand } from "../../testkit/cli";

const dir = mkdtempSync(join(tmpdir(), "bun-launcher-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** A preload that prints the variables and exits before the entry point runs. */
const printer = join(dir, "print-env.ts");
writeFileSync(
  printer,
  `console.log(JSON.stringify({ purge: process.env.MIMALLOC_PURGE_DELAY ?? null, ram: process.env.BUN_JSC_forceRAMSize ?? null, growth: process.env.BUN_JSC_smallHeapGrowthFactor ?? null })); process.exit(0);`,
);

async function seen(
  args: string[],
  env: Record<string, string> = {},
): Promise<{ purge: string; ram: string | null; growth: string | null }> {
  const child = spawnCommand(["sh", "scripts/bun.sh", ...args], env);
  expect(await child.exited).toBe(0);
  return JSON.parse(child.output().trim().split("\n").at(-1)!);
}

test("bun runs with freed memory kept 10 s for reuse (the service returns it at once), or with the delay the environment names", async () => {
  expect((await seen(["run", "--preload", printer, "src/cli/status.ts"])).purge).toBe("10000");
  expect((await seen(["run", "--preload", printer, "src/main.ts"])).purge).toBe("0");
  expect((await seen(["run", "--preload", printer, "src/main.ts"], { MIMALLOC_PURGE_DELAY: "250" })).purge).toBe("250");
});

test("the service started beneath another launched command gets its own delay, not the parent's default", async () => {
  // What a test or benchmark run through the launcher passes on to the service it starts.
  const inherited = { MIMALLOC_PURGE_DELAY: "10000", BUN_SH_PURGE_DELAY_DEFAULT: "10000" };
  expect((await seen(["run", "--preload", printer, "src/main.ts"], inherited)).purge).toBe("0");
  expect((await seen(["run", "--preload", printer, "src/cli/status.ts"], inherited)).purge).toBe("10000");
  // An operator's value is kept, whatever a parent launcher picked.
  const chosen = { MIMALLOC_PURGE_DELAY: "250", BUN_SH_PURGE_DELAY_DEFAULT: "10000" };
  expect((await seen(["run", "--preload", printer, "src/main.ts"], chosen)).purge).toBe("250");
  expect((await seen(["run", "--preload", printer, "src/cli/status.ts"], { MIMALLOC_PURGE_DELAY: "250" })).purge).toBe(
    "250",
  );
});

test("the service (bun start, bun run dev) is told 512 MiB of RAM and a 1.3 x heap growth for its collections; other commands are not", async () => {
  expect(await seen(["run", "--preload", printer, "src/main.ts"])).toMatchObject({ ram: "536870912", growth: "1.3" });
  expect((await seen(["run", "--preload", printer, "src/cli/dev.ts"])).ram).toBe("536870912");
  expect((await seen(["run", "--preload", printer, "src/main.ts"], { BUN_JSC_forceRAMSize: "268435456" })).ram).toBe(
    "268435456",
  );
  expect(
    (await seen(["run", "--preload", printer, "src/main.ts"], { BUN_JSC_smallHeapGrowthFactor: "2" })).growth,
  ).toBe("2");
  expect(await seen(["run", "--preload", printer, "src/cli/status.ts"])).toMatchObject({ ram: null, growth: null });
});
