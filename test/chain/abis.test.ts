import { expect, test } from "bun:test";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { abisFile, abisSource, artifactJson, compile, outDir } from "../../contracts/build";

test("the committed src/chain/abis.ts and contracts/out/*.json equal a rebuild of contracts/src", async () => {
  const contracts = compile();
  // The build writes the very module the code imports.
  expect(abisFile).toBe(Bun.resolveSync("../../src/chain/abis", import.meta.dir));
  expect(readFileSync(abisFile, "utf8")).toBe(await abisSource(contracts));
  expect(readdirSync(outDir).sort()).toEqual([...contracts.keys()].map((n) => `${n}.json`).sort());
  for (const [name, artifact] of contracts) {
    expect(readFileSync(join(outDir, `${name}.json`), "utf8")).toBe(artifactJson(artifact));
  }
}, 60_000);
