// Builds the package in the current directory (packages/client or packages/gate) for both module systems:
// dist/esm (ES modules, the package's own "type": "module") and dist/cjs (CommonJS, with a package.json saying so,
// so Node and TypeScript read its .js and .d.ts as CommonJS). Run by each package's `build` and `prepack`.
import { execFileSync } from "node:child_process";
import { existsSync, rmSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", ".bin", "tsc");
if (!existsSync(tsc)) throw new Error(`no TypeScript compiler at ${tsc}: run the repository's install first`);
const run = (...args) => execFileSync(tsc, ["-p", "tsconfig.json", ...args], { stdio: "inherit" });

rmSync("dist", { recursive: true, force: true });
run("--outDir", "dist/esm");
run("--outDir", "dist/cjs", "--module", "commonjs", "--moduleResolution", "bundler");
writeFileSync("dist/cjs/package.json", JSON.stringify({ type: "commonjs" }) + "\n");
