/** The check's query parsed once per distinct query string (parsing is a pure function of it). */
import { InvalidParameterError } from "../../errors";
import { parseAddress, parseChainId, parseEnum, parsePlanIds, type RawParams } from "../../params";
import { CHECK_MODES } from "./model";
import type { CheckQuery } from "./service";
import { parsePlanKeys } from "./permissions";

/** A mode of the check. */
export type CheckMode = (typeof CHECK_MODES)[number];

/** A parsed request: the question, the mode, the cache key of its indexed answer and its `min_block`. */
export type ParsedCheck = { q: CheckQuery; mode: CheckMode; key: string; minBlock?: bigint };

/** Parsed requests kept by raw query string: at most this many… */
const PARSED_MAX_ENTRIES = 10_000;
/** …of at most this many characters each. */
const PARSED_MAX_QUERY_LENGTH = 512;

/** Where the path of an absolute request URL starts: the first `/` after `scheme://host` (as Elysia finds it). */
const pathStart = (url: string) => url.indexOf("/", 11);

/** The raw query string of a request URL (after its first `?` past the path's start, as Elysia's), or undefined. */
export function rawQuery(url: string): string | undefined {
  const qi = url.indexOf("?", pathStart(url) + 1);
  return qi < 0 ? undefined : url.slice(qi + 1);
}

/** `min_block`: a block number (decimal, up to 20 digits), or absent. */
function parseMinBlock(raw: RawParams): bigint | undefined {
  const v = raw.min_block;
  if (v === undefined) return undefined;
  if (typeof v !== "string" || !/^[0-9]{1,20}$/.test(v)) {
    throw new InvalidParameterError("min_block", "min_block must be a block number (decimal, at most 20 digits)");
  }
  return BigInt(v);
}

/**
 * Parses the query (a 400 on any bad value). On a Spend Permission manager (`managers` holds
 * `<chain_id>:<manager>`), the merchant's `spender` is required and `plan_ids` are optional plan keys.
 */
export function parseCheck(
  raw: RawParams,
  defaultChainId: number,
  managers: ReadonlySet<string> = new Set(),
): ParsedCheck {
  const module = parseAddress(raw, "module_address");
  const wallet = parseAddress(raw, "wallet");
  const chainId = parseChainId(raw, defaultChainId);
  const mode = parseEnum(raw, "mode", CHECK_MODES, "indexed");
  const minBlock = parseMinBlock(raw);
  if (managers.has(`${chainId}:${module}`)) {
    const spender = parseAddress(raw, "spender");
    const q: CheckQuery = { module, wallet, chainId, spender, planIds: parsePlanKeys(raw) };
    return { q, mode, key: `${chainId}:${module}:${wallet}:${spender}:${q.planIds.join(",")}`, minBlock };
  }
  const q: CheckQuery = { module, wallet, planIds: parsePlanIds(raw), chainId };
  return { q, mode, key: `${q.chainId}:${q.module}:${q.wallet}:${q.planIds.join(",")}`, minBlock };
}

/** A memo of parsed queries: `parse(request, query)` parses a query string once, `get(raw)` finds it again. */
export function createParseMemo(defaultChainId: number, managers: ReadonlySet<string> = new Set()) {
  const parsed = new Map<string, ParsedCheck>();
  return {
    get: (raw: string) => parsed.get(raw),
    parse(request: Request, query: unknown): ParsedCheck {
      const raw = rawQuery(request.url) ?? "";
      let p = parsed.get(raw);
      if (!p) {
        p = parseCheck(query as RawParams, defaultChainId, managers);
        if (raw.length <= PARSED_MAX_QUERY_LENGTH) {
          if (parsed.size >= PARSED_MAX_ENTRIES) parsed.clear();
          parsed.set(raw, p);
        }
      }
      return p;
    },
  };
}

/** The memo's type. */
export type ParseMemo = ReturnType<typeof createParseMemo>;
