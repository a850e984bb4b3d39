/**
 * The text rule of every route: a NUL character (which no Postgres text can hold) in any path value, query value or
 * JSON body string is a 400 naming the parameter, never a 500 from the database, and so is a lone surrogate in a
 * JSON body string (stored, it would become U+FFFD), on every documented route and on the local control routes.
 */
import { afterAll, beforeAll, describe, expect, test } from "bun:test";
import { flawedParam } from "../../../src/http/plugins/text-guard";

const nulParam = (input: Parameters<typeof flawedParam>[0]) => {
  const found = flawedParam(input);
  if (found) expect(found.flaw).toBe("nul");
  return found?.param;
};
import { startControlListener, type ControlListener } from "../../../src/http/features/control";
import { dispatcherConfig } from "../../../src/webhooks/dispatcher";
import { ADMIN_KEY, startSeededApp, type SeededApp } from "../../../testkit/app";
import { M1 } from "../../../testkit/seed";

describe("flawedParam", () => {
  test("names the path or query parameter, or the top-level body field, holding a NUL", () => {
    expect(nulParam({ params: { merchant: "0x", id: "a\u0000" } })).toBe("id");
    expect(nulParam({ query: { since: "x", type: ["a", "b\u0000"] } })).toBe("type");
    expect(nulParam({ query: { "a\u0000": "1" } })).toBe("query");
    expect(nulParam({ body: { url: "u", description: "\u0000" } })).toBe("description");
    expect(nulParam({ body: { types: [["x", { y: "\u0000" }]] } })).toBe("types");
    expect(nulParam({ body: { a: { "k\u0000": 1 } } })).toBe("a");
    expect(nulParam({ body: { "k\u0000": 1 } })).toBe("body");
    expect(nulParam({ body: ["\u0000"] })).toBe("body");
    expect(nulParam({ body: "text\u0000" })).toBe("body");
    expect(nulParam({ params: { id: "a" }, query: { q: "b" }, body: { c: ["d", 1, null, true, { e: "f" }] } })).toBe(
      undefined,
    );
  });

  test("a lone surrogate, high or low, anywhere in a body is a flaw; a pair (an emoji) is text", () => {
    expect(flawedParam({ body: { description: "a\ud800b" } })).toEqual({ param: "description", flaw: "surrogate" });
    expect(flawedParam({ body: { label: "x\udfff" } })).toEqual({ param: "label", flaw: "surrogate" });
    expect(flawedParam({ body: { event_types: ["ok", "\udc00"] } })).toEqual({
      param: "event_types",
      flaw: "surrogate",
    });
    expect(flawedParam({ body: { "k\ud83d": 1 } })).toEqual({ param: "body", flaw: "surrogate" });
    expect(flawedParam({ query: { q: "\ud800" } })).toEqual({ param: "q", flaw: "surrogate" });
    expect(flawedParam({ body: { description: "paid 😀 \ud83d\ude00 ✓" } })).toBeUndefined();
  });

  test("a body nested far deeper than the call stack allows is walked without recursion", () => {
    let deep: unknown = "\u0000";
    for (let i = 0; i < 200_000; i++) deep = [deep];
    expect(nulParam({ body: { field: deep } })).toBe("field");
  });
});

describe("every route", () => {
  let s: SeededApp;
  let control: ControlListener;
  const token = "control-token-0123456789";

  beforeAll(async () => {
    s = await startSeededApp({ WEBHOOK_ALLOW_PRIVATE_URLS: "1" });
    control = startControlListener({
      sql: s.db.sql,
      token,
      webhooks: dispatcherConfig(s.config),
      defaultChainId: 31337,
      log: () => {},
    });
  });
  afterAll(async () => {
    await control?.stop();
    await s?.close();
  });

  const send = (base: string, method: string, path: string, body: unknown, auth: string) =>
    fetch(`${base}${path}`, {
      method,
      headers: {
        authorization: `Bearer ${auth}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: body === undefined ? undefined : JSON.stringify(body),
    });

  const handle = async (method: string, path: string, body?: unknown) => {
    const res = await s.app.handle(
      new Request(`http://localhost${path}`, {
        method: method.toUpperCase(),
        headers: {
          authorization: `Bearer ${ADMIN_KEY}`,
          ...(body === undefined ? {} : { "content-type": "application/json" }),
        },
        body: body === undefined ? undefined : JSON.stringify(body),
      }),
    );
    return { status: res.status, body: await res.json() };
  };

  test("a NUL in any documented path, query or body parameter, or a lone surrogate in a body field, is a 400 naming it", async () => {
    const doc = (await s.get("/docs/json")).body as {
      paths: Record<string, Record<string, { parameters?: { in: string; name: string }[]; requestBody?: any }>>;
    };
    const sample: Record<string, string> = { merchant: M1, id: "1" };
    let checked = 0;
    for (const [template, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const path = (values: Record<string, string>) =>
          template.replace(/\{(\w+)\}/g, (_, name: string) => values[name] ?? sample[name] ?? "x");
        const cases: { param: string; path: string; body?: unknown }[] = [];
        for (const p of op.parameters ?? []) {
          if (p.in === "path") cases.push({ param: p.name, path: path({ [p.name]: `x%00` }) });
          if (p.in === "query") cases.push({ param: p.name, path: `${path({})}?${p.name}=1%00` });
        }
        const props = op.requestBody?.content?.["application/json"]?.schema?.properties ?? {};
        for (const name of Object.keys(props)) {
          const value = props[name].type === "array" ? ["a\u0000"] : "a\u0000b";
          cases.push({ param: name, path: path({}), body: { [name]: value } });
        }
        for (const name of Object.keys(props)) {
          const value = props[name].type === "array" ? ["a\ud800"] : "a\udc00b";
          cases.push({ param: name, path: path({}), body: { [name]: value } });
        }
        for (const c of cases) {
          const res = await handle(method, c.path, c.body);
          expect(res.status, `${method} ${c.path} ${JSON.stringify(c.body)}`).toBe(400);
          expect(res.body.error).toMatchObject({ code: "invalid_parameter", param: c.param });
          checked++;
        }
      }
    }
    expect(checked).toBeGreaterThan(60);
  });

  test("the local control routes too", async () => {
    const cases: [string, string, unknown, string][] = [
      ["POST", "/internal/api-keys/x%00/revoke", undefined, "id"],
      ["POST", "/internal/api-keys/", { merchant: M1, label: "a\u0000" }, "label"],
      ["GET", "/internal/api-keys/?merchant=%00", undefined, "merchant"],
      ["DELETE", "/internal/webhook-endpoints/we_%00", undefined, "id"],
      ["POST", "/internal/webhook-endpoints/we_%00/test", undefined, "id"],
      ["POST", "/internal/webhook-endpoints/", { merchant: M1, url: "http://127.0.0.1/\u0000" }, "url"],
      ["POST", "/internal/api-keys/", { merchant: M1, label: "a\ud800" }, "label"],
    ];
    for (const [method, path, body, param] of cases) {
      const res = await send(control.url, method, path, body, token);
      expect(res.status, `${method} ${path}`).toBe(400);
      expect((await res.json()).error.param).toBe(param);
    }
  });
});
