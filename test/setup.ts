import { plugin } from "bun";
import { setDefaultTimeout } from "bun:test";

// Suites start real anvil nodes and databases: every test gets 60 s, under `npm test` (`--timeout 60000`) and under a
// bare `bun test` alike. setDefaultTimeout applies to one file only, so each test file is loaded with the call in
// front of its first line (on that line: its line numbers stay as written).
const TIMEOUT_MS = 60_000;
setDefaultTimeout(TIMEOUT_MS);
plugin({
  name: "test-timeout",
  setup(build) {
    build.onLoad({ filter: /\/test\/.*\.test\.ts$/ }, async ({ path }) => ({
      contents: `import { setDefaultTimeout as __setDefaultTimeout } from "bun:test"; __setDefaultTimeout(${TIMEOUT_MS}); ${await Bun.file(path).text()}`,
      loader: "ts",
    }));
  },
});
