/**
 * The start-up summary: one log line per started role saying what it will do, so that a misconfiguration (a wrong
 * start block, an empty keeper, a URL on the wrong port) shows on the first screen. RPC URLs appear as their host
 * only: providers put API keys in the path.
 */
import { formatEther } from "viem";
import type { Config } from "../common/config";
import type { Logger } from "../common/log";
import type { ChainRegistry } from "../chain/clients";
import type { Service } from "./context";

/** A URL's host, never its path, query or credentials. */
const hostOf = (url: string) => (URL.canParse(url) ? new URL(url).host : "?");

/** The keeper's native balance on a chain (formatted), or why it could not be read within `timeoutMs`. */
async function balanceOf(chains: ChainRegistry, chainId: number, address: `0x${string}`, timeoutMs: number) {
  const client = chains.get(chainId);
  if (!client) return "balance unknown";
  const timeout = new Promise<string>((resolve) => setTimeout(() => resolve("balance unknown (no answer)"), timeoutMs));
  const read = client.getBalance({ address }).then(
    (b) => `balance ${formatEther(b)}`,
    () => "balance unknown (RPC error)",
  );
  return Promise.race([read, timeout]);
}

/** One line per role: message and fields. */
export async function startupLines(
  config: Config,
  chains: ChainRegistry,
  service: Service,
): Promise<{ msg: string; fields: Record<string, unknown> }[]> {
  const lines: { msg: string; fields: Record<string, unknown> }[] = [];
  const indexed = chains.indexed ?? [];
  for (const role of service.roles) {
    if (role === "indexer") {
      const each = indexed.map((c) => `${c.chainId} from block ${c.startBlock} via ${hostOf(c.rpcUrl)}`);
      lines.push({
        msg: `indexer: ${indexed.length} chain${indexed.length === 1 ? "" : "s"}: ${each.join("; ")}`,
        fields: {
          role,
          chains: indexed.map((c) => ({
            chainId: c.chainId,
            processor: c.processor,
            startBlock: c.startBlock,
            confirmations: c.confirmations,
            pollIntervalMs: c.pollIntervalMs,
            rpcHost: hostOf(c.rpcUrl),
          })),
        },
      });
    } else if (role === "keeper") {
      const timeoutMs = Math.min(config.RPC_TIMEOUT_MS, 3_000);
      const charged = indexed.filter((c) => c.processor);
      if (service.keeper) {
        const address = service.keeper.address;
        const balances = await Promise.all(
          charged.map(async (c) => `${c.chainId} ${await balanceOf(chains, c.chainId, address, timeoutMs)}`),
        );
        lines.push({
          msg: `keeper: ${address} charges due subscriptions on ${balances.join("; ")}`,
          fields: { role, address, chains: charged.map((c) => c.chainId), maxFeeGwei: config.KEEPER_MAX_FEE_GWEI },
        });
      }
      for (const { chainId, keeper } of service.spendPermissionKeepers) {
        const balance = await balanceOf(chains, chainId, keeper.address, timeoutMs);
        lines.push({
          msg: `keeper: ${keeper.address} spends its due spend permissions on ${chainId} ${balance}`,
          fields: { role, address: keeper.address, chainId, source: "spend_permission" },
        });
      }
    } else if (role === "webhooks") {
      lines.push({
        msg:
          `webhooks: dispatcher delivers with ${config.WEBHOOK_CONCURRENCY} requests in flight ` +
          `(${config.WEBHOOK_CONCURRENCY_PER_ENDPOINT} per endpoint), retries after ${config.WEBHOOK_RETRY_SCHEDULE} s`,
        fields: {
          role,
          concurrency: config.WEBHOOK_CONCURRENCY,
          perEndpoint: config.WEBHOOK_CONCURRENCY_PER_ENDPOINT,
          privateUrls: config.WEBHOOK_ALLOW_PRIVATE_URLS === "1",
        },
      });
    } else if (role === "api" && service.url) {
      lines.push({
        msg: `api: ${service.url} · docs ${service.url}/docs · dashboard ${service.url}/dashboard`,
        fields: { role, url: service.url, docs: `${service.url}/docs`, metrics: service.metricsUrl ?? null },
      });
    }
  }
  return lines;
}

/** Logs the summary (info); never fails the start. */
export async function logStartup(log: Logger, config: Config, chains: ChainRegistry, service: Service) {
  for (const { msg, fields } of await startupLines(config, chains, service)) log("info", msg, fields);
}
