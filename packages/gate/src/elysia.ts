/**
 * `@subscription-indexer/gate/elysia`: the gate as an Elysia plugin whose routes see `subscription` in their typed
 * context (this entry's declarations need elysia installed; the main entry's do not).
 */
import type { Elysia } from "elysia";
import type { CheckResult } from "./check.js";
import type { Gate, WalletOf } from "./index.js";

/**
 * The plugin of `gate`: `new Elysia().use(gatePlugin(gate, { wallet }))`; routes added after it read
 * `subscription`, and get a 401, 402 or 503 instead when the gate refuses.
 */
export function gatePlugin(gate: Gate, o: WalletOf<{ request: Request; headers: Record<string, string | undefined> }>) {
  const plugin = gate.elysia(o as WalletOf<any>);
  return (app: Elysia) =>
    plugin(app) as Elysia<
      "",
      {
        decorator: {};
        store: {};
        derive: {};
        resolve: { subscription: CheckResult };
      }
    >;
}
