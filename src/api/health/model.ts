/** Documentation of /healthz and /readyz. */
import { Type as t } from "@sinclair/typebox";
import { ErrorEnvelope, jsonSchema } from "../docs/openapi";

const ChainReadiness = t.Object({
  chain_id: t.Integer(),
  indexed_block: t.Union([t.String(), t.Null()]),
  indexed_at: t.Union([t.String({ format: "date-time" }), t.Null()]),
  head_block: t.Union([t.String(), t.Null()]),
  head_seen_at: t.Union([t.String({ format: "date-time" }), t.Null()]),
  lag_blocks: t.Union([t.String(), t.Null()]),
});

const chainExample = {
  chain_id: 31337,
  indexed_block: "1042",
  indexed_at: "2026-11-20T10:00:00.000Z",
  head_block: "1042",
  head_seen_at: "2026-11-20T10:00:00.512Z",
  lag_blocks: "0",
};

/** OpenAPI detail of /healthz. */
export const healthDetail = {
  tags: ["operations"],
  summary: "Liveness",
  description: "200 while the process serves HTTP. Reads nothing.",
  responses: {
    200: {
      description: "The process is up",
      content: {
        "application/json": { schema: jsonSchema(t.Object({ status: t.Literal("ok") })), example: { status: "ok" } },
      },
    },
  },
};

/** OpenAPI detail of /readyz. */
export const readyDetail = {
  tags: ["operations"],
  summary: "Readiness",
  description:
    "200 when the database answers and the indexed chain is within READY_MAX_LAG_BLOCKS of the chain head the " +
    "indexer last observed, observed recently (within max(30 s, 10 poll intervals)); 503 otherwise, with the reasons.",
  responses: {
    200: {
      description: "Ready",
      content: {
        "application/json": {
          schema: jsonSchema(t.Object({ status: t.Literal("ready"), chains: t.Array(ChainReadiness) })),
          example: { status: "ready", chains: [chainExample] },
        },
      },
    },
    503: {
      description: "Not ready: the database is down or the index lags. `error.reasons` says why.",
      content: {
        "application/json": {
          schema: jsonSchema(ErrorEnvelope),
          example: {
            error: {
              type: "api_error",
              code: "unavailable",
              message: "not ready",
              reasons: ["chain 31337 is 57 blocks behind the head (at most 20)"],
              chains: [{ ...chainExample, indexed_block: "985", lag_blocks: "57" }],
              request_id: "req_3f2c9a0d1b7e4c55a8e6f0b2c4d6e8fa",
            },
          },
        },
      },
    },
  },
};
