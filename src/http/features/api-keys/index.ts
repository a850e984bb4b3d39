/** `POST`/`GET /v0/api_keys/:merchant` and `DELETE /v0/api_keys/:merchant/:id`: keys managed by a wallet session. */
import { Elysia } from "elysia";
import { parseAddress, type RawParams } from "../../params";
import { InvalidParameterError, NotFoundError } from "../../errors";
import type { RouteDeps } from "../../deps";
import { createAuthenticator } from "../../plugins/auth";
import { createDetail, KeyParamsDoc, KeysParamsDoc, listDetail, revokeDetail } from "./model";
import { assertFreshSession, createKey, listKeys, parseLabel, requireMerchantSession, revokeKey } from "./service";

const KEY_ID_RE = /^key_[A-Za-z0-9]{1,64}$/;

/** The self-serve key routes, under both rate limits (per client address and per session). */
export function apiKeyRoutes(deps: RouteDeps) {
  const principalOf = createAuthenticator(deps);
  return new Elysia({ prefix: "/v0/api_keys", name: "api-keys" })
    .post(
      "/:merchant",
      async (ctx) => {
        const { params, body, set } = ctx;
        const merchant = parseAddress(params as RawParams, "merchant");
        const label = parseLabel(body);
        const session = await requireMerchantSession(principalOf, ctx, merchant, true);
        assertFreshSession(session);
        set.status = 201;
        set.headers["cache-control"] = "no-store";
        return createKey(deps.sql, merchant, label, session.chainId);
      },
      { params: KeysParamsDoc, detail: createDetail },
    )
    .get(
      "/:merchant",
      async (ctx) => {
        const { params, set } = ctx;
        const merchant = parseAddress(params as RawParams, "merchant");
        const session = await requireMerchantSession(principalOf, ctx, merchant, false);
        set.headers["cache-control"] = "no-store";
        return listKeys(deps.sql, merchant, session.chainId);
      },
      { params: KeysParamsDoc, detail: listDetail },
    )
    .delete(
      "/:merchant/:id",
      async (ctx) => {
        const p = ctx.params as RawParams;
        const merchant = parseAddress(p, "merchant");
        const id = p.id ?? "";
        if (!KEY_ID_RE.test(id)) throw new InvalidParameterError("id", "id must be a key id such as key_9f2c4a1b…");
        const session = await requireMerchantSession(principalOf, ctx, merchant, true);
        if (!(await revokeKey(deps.sql, merchant, id, session.chainId))) {
          throw new NotFoundError("no such API key on this session's chain", "id");
        }
        return { id, revoked: true as const };
      },
      { params: KeyParamsDoc, detail: revokeDetail },
    );
}
