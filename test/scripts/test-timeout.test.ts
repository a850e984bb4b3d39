/**
 * A bare `bun test` (what service.md names as the suite's command) gives every test file the 60 s timeout that
 * `npm test` passes, not Bun's 5 s: test/setup.ts puts the call in front of each file, on its first line.
 */
import { expect, test } from "bun:test";
import { mkdtempSync, mkdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

test("a test of the second file may take over 5 s, and its line numbers stay as written", async () => {
  const dir = mkdtempSync(join(tmpdir(), "test-timeout-"));
  try {
    mkdirSync(join(dir, "test"));
    writeFileSync(join(dir, "test", "a.test.ts"), 'import { test } from "bun:test";\ntest("fast", () => {});\n');
    writeFileSync(
      join(dir, "test", "b.test.ts"),
      'import { expect, test } from "bun:test";\n' +
        'test("slow", async () => { await Bun.sleep(5_500); });\n' +
        'test("line", () => { expect(new Error().stack).toContain("b.test.ts:3"); });\n',
    );
    const run = Bun.spawn(
      [
        process.execPath,
        "test",
        "--preload",
        resolve(import.meta.dir, "../setup.ts"),
        "./test/a.test.ts",
        "./test/b.test.ts",
      ],
      { cwd: dir, stdout: "pipe", stderr: "pipe", env: { ...process.env, DATABASE_URL: "" } },
    );
    const out = (await new Response(run.stdout).text()) + (await new Response(run.stderr).text());
    expect(await run.exited).toBe(0);
    expect(out).toContain("3 pass");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
