/** Documentation of /healthz and /readyz. */
import { Type as t } from "@sinclair/typebox";
import { errorEnvelopeWith, errorResponse, jsonSchema, PUBLIC_ROUTE, requestIdHeader, routeDetail } from "../docs";

const ChainReadiness = t.Object({
  chain_id: t.Integer({ description: "The chain" }),
  indexed_block: t.Union([t.String(), t.Null()], {
    description: "Newest block the index has committed (decimal); null before the first batch",
  }),
  indexed_at: t.Union([t.String({ format: "date-time" }), t.Null()], { description: "Timestamp of that block" }),
  head_block: t.Union([t.String(), t.Null()], { description: "Chain head the indexer last observed (decimal)" }),
  head_seen_at: t.Union([t.String({ format: "date-time" }), t.Null()], {
    description: "When the indexer last observed the head",
  }),
  lag_blocks: t.Union([t.String(), t.Null()], { description: "head_block - indexed_block (decimal)" }),
  deep_reorg_suspected_at: t.Union([t.String(), t.Null()], {
    description:
      "Since when the chain disagrees with every stored block: a reorg deeper than the stored window, which the " +
      "indexer acts on only once several polls confirm it (null when not suspected)",
  }),
  progress: t.Union([t.Number({ minimum: 0, maximum: 1 }), t.Null()], {
    description:
      "Share of the blocks from START_BLOCK to head_block - CONFIRMATIONS that are indexed, a fraction from 0 to 1 " +
      "(4 decimals, rounded down); 1 once the index is within 20 blocks of that target; null before the head is seen",
  }),
  eta_s: t.Union([t.Integer({ minimum: 0 }), t.Null()], {
    description:
      "Seconds until caught up at the indexer's rate over its last 10 s: 0 when caught up; null when unknown (no " +
      "rate measured yet, or the indexer has not committed within the head-staleness window)",
  }),
});

const chainExample = {
  chain_id: 31337,
  indexed_block: "1042",
  indexed_at: "2026-11-20T10:00:00.000Z",
  head_block: "1042",
  head_seen_at: "2026-11-20T10:00:00.512Z",
  lag_blocks: "0",
  deep_reorg_suspected_at: null,
  progress: 1,
  eta_s: 0,
};

/** OpenAPI detail of /healthz. */
export const healthDetail = routeDetail({
  security: PUBLIC_ROUTE,
  tags: ["operations"],
  summary: "Liveness",
  description: "200 while the process serves HTTP. Reads nothing (not even the database), so it never fails.",
  responses: {
    200: {
      description: "The process is up",
      headers: requestIdHeader,
      content: {
        "application/json": {
          schema: jsonSchema(t.Object({ status: t.Literal("ok", { description: "Always ok" }) })),
          example: { status: "ok" },
        },
      },
    },
  },
});

/** OpenAPI detail of /readyz. */
export const readyDetail = routeDetail({
  security: PUBLIC_ROUTE,
  tags: ["operations"],
  summary: "Readiness",
  description:
    "200 when the database answers and the indexed chain is within READY_MAX_LAG_BLOCKS of the chain head the " +
    "indexer last observed, observed recently (within max(30 s, 10 poll intervals)); 503 otherwise, with the reasons.",
  responses: {
    200: {
      description: "Ready",
      headers: requestIdHeader,
      content: {
        "application/json": {
          schema: jsonSchema(
            t.Object({
              status: t.Literal("ready", { description: "Always ready" }),
              chains: t.Array(ChainReadiness, { description: "The indexed chain's progress" }),
            }),
          ),
          example: { status: "ready", chains: [chainExample] },
        },
      },
    },
    503: errorResponse(503, {
      description:
        "Not ready: the database does not answer, or the index lags. `error.reasons` says why (absent when the " +
        "database is down).",
      message: "not ready",
      extra: {
        reasons: ["chain 31337 is 57 blocks behind the head (at most 20)"],
        chains: [{ ...chainExample, indexed_block: "985", lag_blocks: "57", progress: 0.9453, eta_s: 12 }],
      },
      schema: errorEnvelopeWith(
        {
          reasons: t.Optional(t.Array(t.String(), { description: "Why the service is not ready" })),
          chains: t.Optional(t.Array(ChainReadiness, { description: "The indexed chain's progress" })),
        },
        "The error envelope, with the reasons.",
      ),
    }),
  },
});
