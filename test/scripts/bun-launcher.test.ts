/**
 * The launcher every package script runs through (scripts/bun.sh): it sets the allocator's purge delay for the
 * process it execs, unless the environment already names one.
 */
import { expect, test } from "bun:test";
import { spawnCommand } from "../../testkit/cli";

async function purgeDelaySeen(env: Record<string, string>): Promise<string> {
  const child = spawnCommand(["sh", "scripts/bun.sh", "-e", "console.log(process.env.MIMALLOC_PURGE_DELAY)"], env);
  expect(await child.exited).toBe(0);
  return child.output().trim();
}

test("bun runs with freed memory kept 10 s for reuse, or with the delay the environment names", async () => {
  expect(await purgeDelaySeen({})).toBe("10000");
  expect(await purgeDelaySeen({ MIMALLOC_PURGE_DELAY: "250" })).toBe("250");
});
