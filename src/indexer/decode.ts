import { toEventSelector, type AbiEvent, type Hex } from "viem";
import { subscriptionModuleAbi, subscriptionProcessorAbi } from "../chain/abis";
import type { RawLog } from "../chain/rpc";
import type { ArgValue } from "../domain/chain-event";

export type { RawLog } from "../chain/rpc";

/** One decoded log of the processor or a module, ready for the `events` table. */
export type DecodedEvent = {
  blockNumber: bigint;
  logIndex: number;
  txHash: string;
  blockHash: string;
  /** Unix seconds; filled from the log's `blockTimestamp` or the block header. */
  blockTime: number | null;
  address: string;
  name: string;
  subscriptionId: string | null;
  args: Record<string, ArgValue>;
};

type WordDecoder = (word: string) => ArgValue | undefined;
type Input = { name: string; type: string; indexed: boolean; decode: WordDecoder };

// Wide integers repeat a lot (subscription ids, plan amounts): remember their decimal form.
const decimals = new Map<string, string>();
const bigDecimal = (word: string) => {
  let v = decimals.get(word);
  if (v === undefined) {
    if (decimals.size >= 100_000) decimals.clear();
    v = BigInt(`0x${word}`).toString();
    decimals.set(word, v);
  }
  return v;
};

/** A decoder for one static ABI type: viem's conventions (uint ≤ 48 bits as a number, wider as a decimal string). */
function wordDecoder(type: string): WordDecoder {
  if (type === "address") return (w) => `0x${w.slice(24)}`.toLowerCase();
  if (type === "bool") return (w) => w.endsWith("1");
  if (type.startsWith("uint")) {
    const bits = Number(type.slice(4) || "256");
    return bits <= 48 ? (w) => Number.parseInt(w, 16) : bigDecimal;
  }
  return () => undefined;
}

type Spec = { name: string; source: "processor" | "module"; inputs: Input[]; topicCount: number; dataWords: number };

function specsOf(abi: readonly unknown[], source: Spec["source"]): [string, Spec][] {
  return (abi as AbiEvent[])
    .filter((item) => item.type === "event")
    .map((ev) => {
      const inputs = ev.inputs.map((i) => ({
        name: i.name!,
        type: i.type,
        indexed: !!i.indexed,
        decode: wordDecoder(i.type),
      }));
      const topicCount = 1 + inputs.filter((i) => i.indexed).length;
      return [
        toEventSelector(ev),
        { name: ev.name, source, inputs, topicCount, dataWords: inputs.length + 1 - topicCount },
      ];
    });
}

const specs = new Map<string, Spec>([
  ...specsOf(subscriptionProcessorAbi, "processor"),
  ...specsOf(subscriptionModuleAbi, "module"),
]);

/** topic0 of the processor's ModuleCreated (the event that adds an address to index). */
export const moduleCreatedTopic = [...specs].find(
  ([, s]) => s.source === "processor" && s.name === "ModuleCreated",
)![0] as Hex;

/** topic0 of every event a module emits. */
export const moduleTopics: Hex[] = [...specs].filter(([, s]) => s.source === "module").map(([t]) => t as Hex);

/**
 * Decodes a log of the processor or a module by hand (every argument is a static word), much faster than a
 * generic ABI decoder. Returns null for logs that are not ours or do not match the event's layout.
 */
export function decodeLog(log: RawLog, expected: "processor" | "module"): DecodedEvent | null {
  if (log.removed || log.blockNumber == null || log.logIndex == null || !log.transactionHash || !log.blockHash) {
    return null;
  }
  const topic0 = log.topics[0]?.toLowerCase();
  const spec = topic0 ? specs.get(topic0) : undefined;
  if (!spec || spec.source !== expected || log.topics.length !== spec.topicCount) return null;
  const data = log.data.startsWith("0x") ? log.data.slice(2) : log.data;
  if (data.length !== spec.dataWords * 64) return null;
  const args: Record<string, ArgValue> = {};
  // Arguments in ABI declaration order, indexed and not, as viem's decodeEventLog gives them.
  let t = 1;
  let d = 0;
  for (const input of spec.inputs) {
    const word = input.indexed ? log.topics[t++]!.slice(2) : data.slice(d * 64, ++d * 64);
    if (word.length !== 64) return null;
    const value = input.decode(word);
    if (value === undefined) return null;
    args[input.name] = value;
  }
  const subscriptionId = args.subscriptionId;
  return {
    blockNumber: BigInt(log.blockNumber),
    logIndex: Number(log.logIndex),
    txHash: log.transactionHash.toLowerCase(),
    blockHash: log.blockHash.toLowerCase(),
    blockTime: log.blockTimestamp ? Number(log.blockTimestamp) : null,
    address: log.address.toLowerCase(),
    name: spec.name,
    subscriptionId: subscriptionId === undefined ? null : String(subscriptionId),
    args,
  };
}
