/** The documentation check: diary forms fail, the product's words pass, and broken links or anchors fail. */
import { afterAll, beforeAll, expect, test } from "bun:test";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { anchorsOf, checkDocs, findBrokenLinks, findDiary, slug } from "../../scripts/check-docs";

const messages = (file: string, text: string) => findDiary(file, text).map((p) => `${p.line}: ${p.message}`);

test("diary forms fail in markdown and in code comments", () => {
  expect(messages("README.md", "Targets of issue 19, measured in session 14.")).toEqual([
    '1: an issue number: "issue 19"',
    '1: a work session: "session 14"',
  ]);
  expect(messages("docs/x.md", "Fixed in #37 last week.")).toEqual(['1: an issue number (#N): "#37"']);
  expect(messages("docs/x.md", "Sessions 9, 10 and 11 ran on branch h/perf.")).toEqual([
    '1: a work session: "Sessions 9"',
    '1: a branch name: "h/perf"',
  ]);
  expect(messages("docs/x.md", "branches perf, hotcheck, stream")).toEqual([
    '1: branch names: "branches perf, hotcheck, stream"',
  ]);
  expect(messages("src/a.ts", "// measured on /work/main by hand\nconst x = 1;")).toEqual([
    '1: a private path: "/work/"',
  ]);
  expect(messages("test/a.test.ts", 'describe("caps (issue 18): endpoints", () => {});')).toEqual([
    '1: an issue number: "issue 18"',
  ]);
  expect(messages("docs/x.md", "```sh\ncd /home/alice/repo\n```")).toEqual(['2: a private path: "/home/"']);
  expect(messages("sql/migrations/0001_x.sql", "-- see #12 for why")).toEqual([
    '1: an issue number: "see #12"',
    '1: an issue number (#N): "#12"',
  ]);
});

test("the product's own words pass", () => {
  const ok = [
    ["docs/api.md", "A SIWE session lasts `SESSION_TTL_S`; the Session token is shown once."],
    ["src/auth/sessions.ts", "export type Session = { id: string };"],
    [
      "src/cli/dev/seed.ts",
      " * unlocked dev accounts (no keys needed): #0 deployer, #1 merchant, #4 keeper, and #10–#24.",
    ],
    ["src/cli/dev/run.ts", "/** anvil's well-known dev key #4: the demo keeper. */"],
    ["src/dashboard/styles.css", "  color: #545969;"],
    ["docs/x.md", "Open `#/subscriptions` or [Errors](#errors); `curl … #1`."],
    ["docs/x.md", "Gate a route in your server (the `h/` prefix is code)."],
    ["Dockerfile", "WORKDIR /app\nCOPY . ."],
  ];
  for (const [file, text] of ok) expect(findDiary(file!, text!)).toEqual([]);
});

test("slugs and anchors follow GitHub's rules", () => {
  expect(slug("`GET /v0/auth/check`")).toBe("get-v0authcheck");
  expect(slug("Renewals: `GET /v0/renewals/:merchant`")).toBe("renewals-get-v0renewalsmerchant");
  expect(slug("Fly.io, step by step")).toBe("flyio-step-by-step");
  expect(slug("Errors & paging")).toBe("errors--paging");
  const anchors = anchorsOf('# Title\n## Errors\n```\n## not a heading\n```\n## Errors\n<a id="custom"></a>\n');
  expect([...anchors].sort()).toEqual(["custom", "errors", "errors-1", "title"]);
});

let root: string;
beforeAll(() => {
  root = mkdtempSync(join(tmpdir(), "check-docs-"));
  mkdirSync(join(root, "docs"));
  writeFileSync(join(root, "docs", "api.md"), "# API\n## Errors\n## Paging\n");
});
afterAll(() => rmSync(root, { recursive: true, force: true }));

test("a relative link must name a file, and its anchor a heading of that file", () => {
  const text = [
    "[ok](docs/api.md#errors) [ok](docs/api.md) [ok](docs/) [ext](https://example.com/x#y) [self](#intro)",
    "## Intro",
    "[gone](docs/nope.md) [bad anchor](docs/api.md#pagination)",
    "`[code](docs/nope.md)`",
    "```md\n[in a block](docs/nope.md)\n```",
    "![shot](docs/missing.png)",
    "[ref]: docs/api.md#paging",
    "[out](../elsewhere.md)",
  ].join("\n");
  const found = findBrokenLinks(root, "README.md", text).map((p) => `${p.line}: ${p.message}`);
  expect(found).toEqual([
    "3: broken link: docs/nope.md (no docs/nope.md)",
    "3: broken anchor: docs/api.md#pagination (no heading #pagination in docs/api.md)",
    "8: broken link: docs/missing.png (no docs/missing.png)",
    "10: link leaves the repository: ../elsewhere.md",
  ]);
  expect(findBrokenLinks(root, "docs/api.md", "[up](../README.md)")).toEqual([
    { file: "docs/api.md", line: 1, message: "broken link: ../README.md (no README.md)" },
  ]);
});

test("the whole check runs on a git repository and reports files and lines", () => {
  const repo = mkdtempSync(join(tmpdir(), "check-docs-repo-"));
  try {
    mkdirSync(join(repo, "src"));
    writeFileSync(join(repo, "README.md"), "# Product\nSee [the API](docs/api.md).\n");
    writeFileSync(join(repo, "src", "x.ts"), "// ported from session 3's notes\nexport const x = 1;\n");
    Bun.spawnSync(["git", "init", "-q"], { cwd: repo });
    const problems = checkDocs(repo).map((p) => `${p.file}:${p.line}: ${p.message}`);
    expect(problems).toEqual([
      "README.md:2: broken link: docs/api.md (no docs/api.md)",
      'src/x.ts:1: a work session: "session 3"',
    ]);
  } finally {
    rmSync(repo, { recursive: true, force: true });
  }
});
