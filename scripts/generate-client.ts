/**
 * Regenerates `packages/client/src/generated/openapi.ts` from the service's OpenAPI document (`/docs/json`) with
 * openapi-typescript: `bun run scripts/generate-client.ts [<base url of a running service>]`; without a URL it
 * starts the API on an embedded database for the time of the fetch. test/packages/client/generated.test.ts fails when
 * the committed file differs from what this produces from the running app.
 */
import { plugin } from "bun";
import { rmSync } from "node:fs";
import { join } from "node:path";

/** Where the generated types live. */
export const GENERATED_FILE = join(import.meta.dir, "..", "packages", "client", "src", "generated", "openapi.ts");

// openapi-typescript 7 builds its output with TypeScript 5's compiler API, which the root's TypeScript 7 (native,
// no JS API) lacks: its modules are loaded with `typescript5` (typescript@5.9.3) in place of `typescript`.
const ts5 = Bun.resolveSync("typescript5", import.meta.dir);
plugin({
  name: "openapi-typescript-on-typescript5",
  setup(build) {
    build.onLoad({ filter: /openapi-typescript\/dist\/.*\.mjs$/ }, async (args) => {
      const text = await Bun.file(args.path).text();
      return { contents: text.replaceAll(/from ["']typescript["']/g, `from ${JSON.stringify(ts5)}`), loader: "js" };
    });
  },
});

/** The TypeScript source openapi-typescript produces from an OpenAPI document (what the CLI would write). */
export async function renderClientTypes(doc: object): Promise<string> {
  const { default: openapiTS, astToString, COMMENT_HEADER } = await import("openapi-typescript");
  return COMMENT_HEADER + astToString(await openapiTS(doc as never));
}

/** Fetches `<baseUrl>/docs/json`. */
export async function fetchDocument(baseUrl: string): Promise<object> {
  const res = await fetch(new URL("/docs/json", baseUrl));
  if (!res.ok) throw new Error(`GET /docs/json: ${res.status}`);
  return (await res.json()) as object;
}

if (import.meta.main) {
  let url = process.argv[2];
  let stop = async () => {};
  if (!url) {
    const { startEmbeddedApi } = await import("../testkit/embedded");
    const { service, dataDir } = await startEmbeddedApi("client-gen-");
    url = service.url!;
    stop = async () => {
      await service.stop();
      rmSync(dataDir, { recursive: true, force: true });
    };
  }
  try {
    await Bun.write(GENERATED_FILE, await renderClientTypes(await fetchDocument(url)));
    console.log(`wrote ${GENERATED_FILE}`);
  } finally {
    await stop();
  }
}
