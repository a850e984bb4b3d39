/**
 * `bun run deploy`: deploys SubscriptionProcessor to RPC_URL with DEPLOYER_PRIVATE_KEY and prints one JSON line
 * `{"chainId":…,"processor":"0x…","startBlock":"…"}`. FEE_BPS (default 100, at most 1000) and FEE_RECIPIENT
 * (default the deployer) set the protocol fee. Any bad input or failure: a message on stderr and exit code 1.
 */
import { AppError } from "../common/errors";
import { createPublicClient, createWalletClient, http, isAddress, webSocket, type Address, type Hex } from "viem";
import { privateKeyToAccount } from "viem/accounts";
import { deployProtocol } from "../chain/deploy";
import { chainDefinition } from "../chain/define";

class UsageError extends AppError {}

type DeployEnv = { rpcUrl: string; privateKey: Hex; feeBps: number; feeRecipient?: Address };

/** Reads and validates the deploy variables; the error message names the offending variable. */
export function parseDeployEnv(env: Record<string, string | undefined>): DeployEnv {
  const rpcUrl = env.RPC_URL?.trim();
  if (!rpcUrl) throw new UsageError("RPC_URL is required (an http(s) or ws(s) URL)");
  if (!/^(https?|wss?):\/\//.test(rpcUrl)) throw new UsageError(`RPC_URL=${JSON.stringify(rpcUrl)} is invalid`);
  const key = env.DEPLOYER_PRIVATE_KEY?.trim();
  if (!key) throw new UsageError("DEPLOYER_PRIVATE_KEY is required (0x + 64 hex)");
  if (!/^0x[0-9a-fA-F]{64}$/.test(key)) throw new UsageError("DEPLOYER_PRIVATE_KEY is invalid: expected 0x + 64 hex");
  const feeRaw = env.FEE_BPS?.trim() || "100";
  if (!/^\d+$/.test(feeRaw) || Number(feeRaw) > 1000) {
    throw new UsageError(`FEE_BPS=${JSON.stringify(feeRaw)} is invalid: expected an integer from 0 to 1000`);
  }
  const recipient = env.FEE_RECIPIENT?.trim();
  if (recipient && !isAddress(recipient, { strict: false })) {
    throw new UsageError(`FEE_RECIPIENT=${JSON.stringify(recipient)} is invalid: expected 0x + 40 hex`);
  }
  return { rpcUrl, privateKey: key as Hex, feeBps: Number(feeRaw), feeRecipient: recipient as Address | undefined };
}

async function main(): Promise<void> {
  const env = parseDeployEnv(process.env);
  const account = privateKeyToAccount(env.privateKey);
  const transport = env.rpcUrl.startsWith("ws")
    ? webSocket(env.rpcUrl, { retryCount: 0 })
    : http(env.rpcUrl, { retryCount: 0 });
  const chainId = await createPublicClient({ transport })
    .getChainId()
    .catch((err: { shortMessage?: string; message?: string }) => {
      throw new UsageError(`RPC_URL ${env.rpcUrl} did not answer: ${err.shortMessage ?? err.message}`);
    });
  const chain = chainDefinition(chainId, env.rpcUrl);
  const publicClient = createPublicClient({ chain, transport, cacheTime: 0 });
  const walletClient = createWalletClient({ chain, transport, account });
  const { processor, startBlock } = await deployProtocol({
    walletClient,
    publicClient,
    feeBps: env.feeBps,
    feeRecipient: env.feeRecipient ?? account.address,
  });
  console.log(JSON.stringify({ chainId, processor: processor.toLowerCase(), startBlock: startBlock.toString() }));
}

if (import.meta.main) {
  try {
    await main();
    process.exit(0); // a websocket transport would otherwise keep the process alive
  } catch (err) {
    const e = err as { shortMessage?: string; message?: string };
    console.error(
      err instanceof UsageError ? e.message : `deploy failed: ${e.shortMessage ?? e.message ?? String(err)}`,
    );
    process.exit(1);
  }
}
