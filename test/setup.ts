import { setDefaultTimeout } from "bun:test";

// Suites start real anvil nodes and databases; bunfig's `timeout` does not reach hooks.
setDefaultTimeout(60_000);
