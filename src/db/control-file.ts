import { chmodSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** Where a process that owns an embedded database can be reached by the command-line tools. */
export type ControlInfo = { pid: number; url: string; token: string };

const FILE = "control.json";

/** Publishes the owner's control endpoint in its data directory (readable by the owner only). */
export function writeControlFile(dataDir: string, info: ControlInfo): () => void {
  const path = join(dataDir, FILE);
  writeFileSync(path, JSON.stringify(info), { mode: 0o600 });
  chmodSync(path, 0o600);
  return () => rmSync(path, { force: true });
}

/** The live owner of a data directory, if one published its control endpoint. */
export function readControlFile(dataDir: string): ControlInfo | null {
  try {
    const info = JSON.parse(readFileSync(join(dataDir, FILE), "utf8")) as ControlInfo;
    process.kill(info.pid, 0);
    return info;
  } catch {
    return null;
  }
}
