/**
 * Dumps the service's OpenAPI document (what `/docs/json` serves) and lints it with Redocly's recommended rules,
 * warnings counted as errors (`redocly.yaml`): `bun run scripts/openapi.ts` (dump and lint, exit 1 on a problem),
 * `bun run scripts/openapi.ts dump [file]` (dump only). Without a URL it starts the API on an embedded database for
 * the time of the fetch; `OPENAPI_URL=<base url>` reads a running service instead. Runs offline (telemetry off).
 */
import { mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";

const root = join(import.meta.dir, "..");

/** Where the dumped document goes (under the repository's ignored `tmp/`, named in `.redocly.lint-ignore.yaml`). */
export const OPENAPI_FILE = join(root, "tmp", "openapi.json");

/** The OpenAPI document of the app: from `baseUrl`, or from an API started on an embedded database. */
export async function loadDocument(baseUrl?: string): Promise<Record<string, unknown>> {
  if (baseUrl) return fetchJson(baseUrl);
  const { startEmbeddedApi } = await import("../testkit/embedded");
  const { service, dataDir } = await startEmbeddedApi("openapi-dump-");
  try {
    return await fetchJson(service.url!);
  } finally {
    await service.stop();
    rmSync(dataDir, { recursive: true, force: true });
  }
}

async function fetchJson(baseUrl: string): Promise<Record<string, unknown>> {
  const res = await fetch(new URL("/docs/json", baseUrl));
  if (!res.ok) throw new Error(`GET /docs/json: ${res.status}`);
  return (await res.json()) as Record<string, unknown>;
}

/** Writes the document to `file` (pretty JSON). */
export async function dumpDocument(file = OPENAPI_FILE, baseUrl = process.env.OPENAPI_URL): Promise<string> {
  mkdirSync(dirname(file), { recursive: true });
  await Bun.write(file, `${JSON.stringify(await loadDocument(baseUrl), null, 2)}\n`);
  return file;
}

/** Runs `redocly lint` on `file` with the repository's `redocly.yaml`; resolves to its exit code. */
export async function lintDocument(file = OPENAPI_FILE): Promise<number> {
  const cli = Bun.resolveSync("@redocly/cli/bin/cli.js", root);
  const proc = Bun.spawn([process.execPath, cli, "lint", "--config", join(root, "redocly.yaml"), file], {
    cwd: root,
    env: { ...process.env, REDOCLY_TELEMETRY: "off", REDOCLY_SUPPRESS_UPDATE_NOTICE: "true", NO_COLOR: "1" },
    stdout: "inherit",
    stderr: "inherit",
  });
  return proc.exited;
}

if (import.meta.main) {
  const [command, target] = process.argv.slice(2);
  if (command === "dump") {
    console.log(`wrote ${await dumpDocument(target ?? OPENAPI_FILE)}`);
  } else {
    await dumpDocument();
    process.exit(await lintDocument());
  }
}
