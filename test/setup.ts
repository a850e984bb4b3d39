import { setDefaultTimeout } from "bun:test";

// Suites start real anvil nodes and databases. `npm test` passes `--timeout 60000`; for a bare `bun test`
// this covers the first file only (setDefaultTimeout is per file), so slow hooks and tests also carry their own.
setDefaultTimeout(60_000);
