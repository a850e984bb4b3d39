import { AppError } from "../common/errors";
import { spawn, type Subprocess } from "bun";
import { existsSync } from "node:fs";
import { join } from "node:path";

/** A running anvil node started from the `@foundry-rs/anvil` npm package. */
export type Anvil = { rpcUrl: string; port: number; chainId: number; stop: () => Promise<void> };

/** Thrown when the anvil binary is missing or does not answer. */
export class AnvilStartError extends AppError {}

/** Path of the anvil binary shipped inside the npm package for this platform. */
export function anvilBinary(): string {
  const arch = process.arch === "arm64" ? "arm64" : "amd64";
  const os = process.platform === "darwin" ? "darwin" : process.platform === "win32" ? "win32" : "linux";
  const root = join(import.meta.dir, "..", "..", "node_modules", "@foundry-rs", `anvil-${os}-${arch}`, "bin");
  const bin = join(root, os === "win32" ? "anvil.exe" : "anvil");
  if (!existsSync(bin)) throw new AnvilStartError(`anvil binary not found at ${bin}: run bun install`);
  return bin;
}

async function freePort(): Promise<number> {
  const server = Bun.serve({ port: 0, hostname: "127.0.0.1", fetch: () => new Response() });
  const port = server.port!;
  server.stop(true);
  return port;
}

/** Starts anvil on a free loopback port and resolves once it answers JSON-RPC. */
export async function startAnvil(opts: { port?: number; args?: string[]; blockTime?: number } = {}): Promise<Anvil> {
  const port = opts.port ?? (await freePort());
  const args = ["--host", "127.0.0.1", "--port", String(port), "--silent", ...(opts.args ?? [])];
  if (opts.blockTime) args.push("--block-time", String(opts.blockTime));
  const proc: Subprocess = spawn([anvilBinary(), ...args], { stdout: "ignore", stderr: "pipe" });
  const rpcUrl = `http://127.0.0.1:${port}`;
  // Generous: the first start of the 44 MB binary on a busy machine can take several seconds.
  const deadline = Date.now() + 30_000;
  let chainId = 0;
  while (Date.now() < deadline) {
    try {
      const res = await fetch(rpcUrl, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ jsonrpc: "2.0", id: 1, method: "eth_chainId", params: [] }),
      });
      const body = (await res.json()) as { result: string };
      chainId = Number(body.result);
      break;
    } catch {
      if (proc.exitCode !== null) throw new AnvilStartError(`anvil exited with code ${proc.exitCode}`);
      await Bun.sleep(50);
    }
  }
  if (!chainId) {
    proc.kill();
    throw new AnvilStartError(`anvil did not answer on ${rpcUrl} within 30 s`);
  }
  return {
    rpcUrl,
    port,
    chainId,
    stop: async () => {
      proc.kill();
      await proc.exited;
    },
  };
}
