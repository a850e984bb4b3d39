/**
 * Every TypeScript snippet of the docs (README.md, docs/*.md, packages/*\/README.md) type-checks: each ```ts block
 * is written to a module of its own and `tsc --noEmit` checks them together, with the packages resolved to their
 * sources. Two visible markers, on a block's first line: `// partial` opts a deliberately partial block out, and
 * `// continued` checks a block as the end of the previous block of the same file (so it uses its declarations).
 */
import { afterAll, expect, test } from "bun:test";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

const root = join(import.meta.dir, "..", "..");

/** A TypeScript block of a markdown file: where it starts and its code. */
type Snippet = { file: string; line: number; code: string };

/** The ```ts / ```typescript / ```tsx blocks of one markdown text: `// partial` ones left out, `// continued` ones
 * joined to the previous block. */
export function snippetsOf(file: string, text: string): Snippet[] {
  const out: Snippet[] = [];
  const lines = text.split("\n");
  for (let i = 0; i < lines.length; i++) {
    const open = lines[i]!.match(/^(\s*)(`{3,})(ts|typescript|tsx)\s*$/);
    if (!open) continue;
    const body: string[] = [];
    let j = i + 1;
    for (; j < lines.length && !lines[j]!.trimStart().startsWith(open[2]!); j++)
      body.push(lines[j]!.slice(open[1]!.length));
    const first = body[0] ?? "";
    const previous = out[out.length - 1];
    if (/^\s*\/\/\s*partial\b/.test(first)) {
      // left out, visibly
    } else if (/^\s*\/\/\s*continued\b/.test(first) && previous) {
      // Checked as one module with the block before; errors are reported against the first block's lines.
      previous.code += "\n" + body.join("\n");
    } else {
      out.push({ file, line: i + 2, code: body.join("\n") });
    }
    i = j;
  }
  return out;
}

/** The markdown files whose snippets are checked. */
function markdownFiles(): string[] {
  const files = ["README.md"];
  for (const name of readdirSync(join(root, "docs"))) if (name.endsWith(".md")) files.push(`docs/${name}`);
  for (const pkg of readdirSync(join(root, "packages"))) {
    if (existsSync(join(root, "packages", pkg, "README.md"))) files.push(`packages/${pkg}/README.md`);
  }
  return files.filter((f) => existsSync(join(root, f)));
}

const dir = join(root, "tmp", `snippets-${process.pid}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

test("the snippet finder reads ts blocks, keeps their lines and honours the partial marker", () => {
  const text =
    "# T\n```ts\nconst a = 1;\n```\n\n```ts\n// partial: a fragment\nfoo(\n```\n```sh\nls\n```\n```typescript\nlet b;\n```\n";
  expect(snippetsOf("x.md", text)).toEqual([
    { file: "x.md", line: 3, code: "const a = 1;" },
    { file: "x.md", line: 14, code: "let b;" },
  ]);
});

test("every TypeScript snippet of the docs and the package READMEs type-checks", () => {
  const snippets = markdownFiles().flatMap((f) => snippetsOf(f, readFileSync(join(root, f), "utf8")));
  expect(snippets.length).toBeGreaterThan(0);
  mkdirSync(dir, { recursive: true });
  const names = snippets.map((s, i) => {
    const name = `s${i}-${s.file.replace(/[^\w]+/g, "_")}-${s.line}.ts`;
    // `export {}` makes each snippet a module of its own, so two snippets may declare the same names.
    writeFileSync(join(dir, name), `${s.code}\nexport {};\n`);
    return name;
  });
  const paths: Record<string, string[]> = {};
  for (const pkg of readdirSync(join(root, "packages"))) {
    const entry = join(root, "packages", pkg, "src", "index.ts");
    if (existsSync(entry)) paths[`@subscription-indexer/${pkg}`] = [relative(dir, entry)];
  }
  const base = JSON.parse(readFileSync(join(root, "tsconfig.json"), "utf8"));
  writeFileSync(
    join(dir, "tsconfig.json"),
    JSON.stringify({
      compilerOptions: { ...base.compilerOptions, paths, typeRoots: [join(root, "node_modules", "@types")] },
      files: names,
    }),
  );
  const tsc = Bun.spawnSync([process.execPath, "x", "tsc", "--noEmit", "-p", join(dir, "tsconfig.json")], {
    cwd: root,
    env: { ...process.env, PATH: `${join(root, "node_modules", ".bin")}:${process.env.PATH}` },
  });
  const output = tsc.stdout.toString() + tsc.stderr.toString();
  // Name each error by its markdown file and line instead of the temporary module.
  const errors = output
    .split("\n")
    .filter((l) => /error TS\d+/.test(l))
    .map((l) => {
      const m = l.match(/s(\d+)-[\w]+-\d+\.ts\((\d+),(\d+)\)(.*)$/);
      if (!m) return l;
      const s = snippets[Number(m[1])]!;
      return `${s.file}:${s.line + Number(m[2]) - 1}:${m[3]}${m[4]}`;
    });
  expect(errors).toEqual([]);
  expect(tsc.exitCode).toBe(0);
}, 120_000);
