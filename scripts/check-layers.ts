/**
 * Layering check of src/ (run by .ci/run): no import cycles, and data flows one way — chain → indexer → tables →
 * API / keeper / dispatchers. Counts every import, type-only ones included. Exit 1 with one line per violation.
 */
import { readdirSync, readFileSync, statSync, existsSync } from "node:fs";
import { dirname, join, relative } from "node:path";

/** [from, to, why]: a file under `from` may not import a file under `to` (prefixes of paths below src/). */
const RULES: [RegExp, RegExp, string][] = [
  [/^domain\//, /^(?!domain\/)/, "domain/ holds pure rules and imports nothing of ours"],
  [/^common\//, /^(?!(common|domain)\/)/, "common/ is a leaf"],
  [/^(chain|db)\//, /^(indexer|keeper|http|service|cli|auth|webhooks|metrics)\//, "chain/ and db/ sit below the roles"],
  [/^auth\//, /^(http|indexer|keeper|service|cli)\//, "auth/ throws its own errors; http/ maps them"],
  [/^http\//, /^(indexer|keeper|service|cli)\//, "http/ reads tables, never the indexer or keeper"],
  [/^(indexer|keeper|webhooks|events)\//, /^(http|cli|service)\//, "roles do not reach into the API or the wiring"],
  [/^(?!cli\/)/, /^cli\//, "nothing imports cli/"],
];

const root = join(import.meta.dir, "..", "src");
const files: string[] = [];
const walk = (dir: string) => {
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (p.endsWith(".ts")) files.push(relative(root, p));
  }
};
walk(root);

const resolve = (from: string, spec: string): string | null => {
  const base = join(dirname(from), spec);
  for (const c of [base, `${base}.ts`, join(base, "index.ts")]) {
    if (c.endsWith(".ts") && existsSync(join(root, c))) return c;
  }
  return null;
};

const graph = new Map<string, string[]>();
const problems: string[] = [];
const importRe = /(?:^|\n)\s*(?:import|export)\b[^;'"]*?from\s*["']([^"']+)["']|import\(\s*["']([^"']+)["']\s*\)/g;
for (const f of files) {
  const text = readFileSync(join(root, f), "utf8");
  const deps: string[] = [];
  for (const m of text.matchAll(importRe)) {
    const spec = m[1] ?? m[2]!;
    if (spec.startsWith("@subscription-indexer/"))
      problems.push(`src/${f} imports ${spec}: the service never depends on the SDK packages`);
    if (!spec.startsWith(".")) continue;
    const target = resolve(f, spec);
    if (!target) {
      if (!spec.startsWith("../")) problems.push(`${f}: cannot resolve ${spec}`);
      continue;
    }
    if (target.startsWith("..")) problems.push(`src/${f} imports ${spec}, outside src/`);
    deps.push(target);
    for (const [from, to, why] of RULES) {
      if (from.test(f) && to.test(target)) problems.push(`src/${f} → src/${target}: ${why}`);
    }
  }
  graph.set(f, deps);
}

// Tarjan's strongly connected components: any component of two or more files (or a self-import) is a cycle.
let index = 0;
const idx = new Map<string, number>();
const low = new Map<string, number>();
const stack: string[] = [];
const onStack = new Set<string>();
const strong = (v: string) => {
  idx.set(v, index);
  low.set(v, index++);
  stack.push(v);
  onStack.add(v);
  for (const w of graph.get(v) ?? []) {
    if (!idx.has(w)) {
      strong(w);
      low.set(v, Math.min(low.get(v)!, low.get(w)!));
    } else if (onStack.has(w)) low.set(v, Math.min(low.get(v)!, idx.get(w)!));
  }
  if (low.get(v) === idx.get(v)) {
    const comp: string[] = [];
    let w: string;
    do {
      w = stack.pop()!;
      onStack.delete(w);
      comp.push(w);
    } while (w !== v);
    if (comp.length > 1 || (graph.get(v) ?? []).includes(v)) problems.push(`import cycle: ${comp.sort().join(" ↔ ")}`);
  }
};
for (const f of files) if (!idx.has(f)) strong(f);

const edges = [...graph.values()].reduce((n, d) => n + d.length, 0);
if (problems.length) {
  for (const p of problems) console.log(p);
  console.log(`layers: ${problems.length} problem(s) in ${files.length} files, ${edges} imports`);
  process.exit(1);
}
console.log(`layers ok: ${files.length} files, ${edges} imports, no cycle`);
