/**
 * Compiles contracts/multicall/Multicall3.sol and writes its runtime code to src/chain/multicall3-code.ts, which the
 * dev and test chains install at the canonical Multicall3 address with `anvil_setCode`.
 *
 *   bun run contracts/build-multicall.ts
 */
import { compileRuntime, writeRuntimeModule } from "./runtime-code";

/** The runtime code of Multicall3. */
export const compileMulticall3 = () => compileRuntime("Multicall3");

if (import.meta.main) {
  writeRuntimeModule({
    name: "Multicall3",
    script: "contracts/build-multicall.ts",
    outFile: "src/chain/multicall3-code.ts",
    constName: "multicall3RuntimeCode",
    doc: "Runtime code of Multicall3, installed at its canonical address on the dev and test chains.",
  });
}
