/**
 * Documentation check (run by .ci/run): the repository speaks of the product only, and every relative link of a
 * markdown file leads somewhere.
 *
 * 1. Diary forms fail in markdown, code, comments, tests, benches and scripts: an issue number (the word issue
 *    or a hash sign before a number), a numbered work session, a helper's branch name and a private path of a
 *    machine (the patterns below, with examples in the script's test). The product's own words pass:
 *    a "SIWE session", a `Session` type, anvil's "account #4", a CSS colour `#545969`. What else passes is the
 *    short ALLOW list below, each entry with its reason.
 * 2. A relative link or image of a markdown file (`[t](docs/api.md#errors)`) must name a file or folder that
 *    exists, and its anchor a heading of that file (GitHub's slugs: lower case, punctuation dropped, spaces as
 *    hyphens, `-1`, `-2` for repeats). Links inside code blocks and inline code are not links.
 *
 * Usage: `bun run scripts/check-docs.ts [root]`: one line per problem (`file:line: what`), exit 1 when any.
 */
import { existsSync, readFileSync, statSync } from "node:fs";
import { dirname, join, normalize, relative } from "node:path";

/** One finding: where and what. */
export type Problem = { file: string; line: number; message: string };

/** A diary pattern and the words it reports. */
type Rule = { re: RegExp; what: string; markdownOnly?: boolean };

const RULES: Rule[] = [
  { re: /\bissues?\s+#?\d+/i, what: "an issue number" },
  { re: /\b(?:fixes|fixed|closes|closed|resolves|see|pr|pull request)\s+#\d+\b/i, what: "an issue number" },
  { re: /(?<![\w&/#-])#\d{1,5}\b(?![\w-])/, what: "an issue number (#N)", markdownOnly: true },
  { re: /\bsessions?\s+\d{1,2}\b/i, what: "a work session" },
  { re: /(?<![\w./-])h\/[a-z][\w-]*/, what: "a branch name" },
  { re: /\bbranch(?:es)?\s+(?!names?\b)(?:h\/)?[a-z][\w-]*(?:,\s*[a-z][\w-]*)+/i, what: "branch names" },
  { re: /(?<![\w.])\/(?:work|home|root)\//, what: "a private path" },
];

/**
 * Legitimate forms a rule would otherwise report: [pattern of the matched text and its surroundings, reason].
 * A finding passes when its line matches one of these at the finding's position.
 */
const ALLOW: [RegExp, string][] = [
  [/\b(?:account|key)s?\b[^.]*#\d+/i, "anvil's numbered dev accounts (#0 deployer, #4 keeper)"],
  [/#\d+\s*[–-]\s*#\d+/, "a range of anvil's dev accounts (#10–#24)"],
  [/, #\d+/, "a list of anvil's dev accounts"],
];

/** File names (relative, forward slashes) that are never read: generated files and third-party code. */
const SKIP = [
  /(^|\/)node_modules\//,
  /^\.tools\//,
  /^\.data\//,
  /^contracts\/out\//,
  /\.(png|jpe?g|gif|ico|lock|lockb|tgz|wasm)$/,
  /^bun\.lock$/,
];

/** Extensions (and names) of files whose whole text is read: markdown, code, tests, benches, scripts, config. */
const TEXT =
  /\.(md|ts|tsx|js|mjs|cjs|sql|sh|sol|toml|ya?ml|css|html)$|(^|\/)(Dockerfile|run|\.env\.example|\.gitmessage)$/;

/** The lines of a markdown file that are prose, with the code blocks blanked and inline code removed. */
export function markdownProse(text: string, keepInlineCode = false): string[] {
  let fence: string | null = null;
  return text.split("\n").map((line) => {
    const m = line.match(/^\s*(`{3,}|~{3,})/);
    if (fence) {
      if (m && m[1]![0] === fence[0] && m[1]!.length >= fence.length) fence = null;
      return "";
    }
    if (m) {
      fence = m[1]!;
      return "";
    }
    return keepInlineCode ? line : line.replace(/(`+)[^`]*?\1/g, "");
  });
}

/** Diary findings of one file's text. Markdown is read as prose and as code (a private path in a block counts). */
export function findDiary(file: string, text: string): Problem[] {
  const markdown = file.endsWith(".md");
  const lines = text.split("\n");
  const prose = markdown ? markdownProse(text) : lines;
  const out: Problem[] = [];
  lines.forEach((line, i) => {
    for (const rule of RULES) {
      const subject = rule.markdownOnly ? (markdown ? prose[i]! : commentOf(line)) : line;
      if (!subject) continue;
      const m = rule.re.exec(subject);
      if (!m) continue;
      if (ALLOW.some(([re]) => allowedAt(subject, m.index, re))) continue;
      out.push({ file, line: i + 1, message: `${rule.what}: "${m[0]}"` });
    }
  });
  return out;
}

/** The comment part of a code line (`//`, `/*`, ` *`, `#`, `--`), or "" when it has none. */
function commentOf(line: string): string {
  const m = line.match(/(?:^|\s)(?:\/\/|\/\*+|\*|--)\s(.*)$/) ?? line.match(/^\s*#\s(.*)$/);
  return m ? m[1]! : "";
}

function allowedAt(subject: string, index: number, re: RegExp): boolean {
  const g = new RegExp(re.source, re.flags.includes("g") ? re.flags : re.flags + "g");
  for (const m of subject.matchAll(g)) {
    if (m.index! <= index + 1 && index <= m.index! + m[0].length) return true;
  }
  return false;
}

/** GitHub's anchor of a heading's text: markup dropped, lower case, punctuation dropped, spaces as hyphens. */
export function slug(heading: string): string {
  const text = heading
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/\[([^\]]*)\]\([^)]*\)/g, "$1")
    .replace(/<[^>]+>/g, "")
    .replace(/[`*]/g, "")
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

/** The anchors of a markdown file: one per heading (repeats get -1, -2), plus explicit `<a id|name="…">`. */
export function anchorsOf(text: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  for (const line of markdownProse(text, true)) {
    const h = line.match(/^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$/);
    if (h) {
      const base = slug(h[1]!);
      const n = seen.get(base) ?? 0;
      seen.set(base, n + 1);
      out.add(n === 0 ? base : `${base}-${n}`);
    }
    for (const a of line.matchAll(/<a\s+(?:id|name)="([^"]+)"/g)) out.add(a[1]!);
  }
  return out;
}

/** The relative link targets of a markdown text, with their lines (external links and code are left out). */
export function linksOf(text: string): { line: number; target: string }[] {
  const out: { line: number; target: string }[] = [];
  markdownProse(text).forEach((line, i) => {
    const found = [
      ...[...line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)].map((m) => m[1]!),
      ...[...line.matchAll(/^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+"[^"]*")?\s*$/g)].map((m) => m[1]!),
      ...[...line.matchAll(/<(?:a|img)\s[^>]*?(?:href|src)="([^"]+)"/g)].map((m) => m[1]!),
    ];
    for (const target of found) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target) || target.startsWith("//")) continue;
      out.push({ line: i + 1, target });
    }
  });
  return out;
}

/** Broken relative links of the markdown file `file` (relative to `root`). */
export function findBrokenLinks(root: string, file: string, text: string): Problem[] {
  const out: Problem[] = [];
  for (const { line, target } of linksOf(text)) {
    const [pathPart, anchor] = splitOnce(target, "#");
    const path = decodeURIComponent(pathPart);
    const to = path === "" ? file : normalize(path.startsWith("/") ? path.slice(1) : join(dirname(file), path));
    if (to.startsWith("..")) {
      out.push({ file, line, message: `link leaves the repository: ${target}` });
      continue;
    }
    const abs = join(root, to);
    if (to !== file && !existsSync(abs)) {
      out.push({ file, line, message: `broken link: ${target} (no ${to})` });
      continue;
    }
    if (anchor === undefined || anchor === "") continue;
    if (!to.endsWith(".md") || (to !== file && statSync(abs).isDirectory())) continue;
    const anchors = anchorsOf(to === file ? text : readFileSync(abs, "utf8"));
    if (!anchors.has(decodeURIComponent(anchor).toLowerCase())) {
      out.push({ file, line, message: `broken anchor: ${target} (no heading #${anchor} in ${to})` });
    }
  }
  return out;
}

function splitOnce(s: string, sep: string): [string, string | undefined] {
  const i = s.indexOf(sep);
  return i < 0 ? [s, undefined] : [s.slice(0, i), s.slice(i + 1)];
}

/** The files the check reads: tracked and new (not ignored) files of the repository at `root`. */
export function repositoryFiles(root: string): string[] {
  const run = Bun.spawnSync(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], { cwd: root });
  if (run.exitCode !== 0) throw new Error(`git ls-files failed in ${root}: ${run.stderr.toString()}`);
  return run.stdout
    .toString()
    .split("\0")
    .filter((f) => f && TEXT.test(f) && !SKIP.some((re) => re.test(f)) && existsSync(join(root, f)));
}

/** Every problem of the repository at `root`. */
export function checkDocs(root: string): Problem[] {
  const out: Problem[] = [];
  for (const file of repositoryFiles(root)) {
    if (file === "scripts/check-docs.ts" || file === "test/scripts/check-docs.test.ts") continue;
    const text = readFileSync(join(root, file), "utf8");
    out.push(...findDiary(file, text));
    if (file.endsWith(".md")) out.push(...findBrokenLinks(root, file, text));
  }
  return out;
}

if (import.meta.main) {
  const root = process.argv[2] ?? join(import.meta.dir, "..");
  const problems = checkDocs(root);
  for (const p of problems)
    console.log(`${relative(process.cwd(), join(root, p.file)) || p.file}:${p.line}: ${p.message}`);
  if (problems.length > 0) {
    console.log(`docs check: ${problems.length} problem(s)`);
    process.exit(1);
  }
  console.log("docs check ok");
}
