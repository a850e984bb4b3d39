/**
 * Compiles contracts/multicall/GasCappedAggregate.sol and writes its runtime code to
 * src/renewals/capped-aggregate-code.ts, which the renewal reader places at an unused address with `eth_call`'s state
 * override.
 *
 *   bun run contracts/build-capped.ts
 */
import { compileRuntime, writeRuntimeModule } from "./runtime-code";

/** The runtime code of GasCappedAggregate. */
export const compileCappedAggregate = () => compileRuntime("GasCappedAggregate");

if (import.meta.main) {
  writeRuntimeModule({
    name: "GasCappedAggregate",
    script: "contracts/build-capped.ts",
    outFile: "src/renewals/capped-aggregate-code.ts",
    constName: "cappedAggregateCode",
    doc: "Runtime code of GasCappedAggregate, placed by the renewal reader through eth_call's state override.",
  });
}
