/**
 * One input rule for every route: no path value, query value or string of a JSON body (field names included) may
 * hold a NUL character (U+0000). No Postgres text can store one, so a value carrying it would fail in the database
 * (a 500) wherever it reached SQL; instead the request is a 400 naming the parameter, before any route runs.
 */
import { Elysia } from "elysia";
import { InvalidParameterError } from "../errors";

const NUL = "\u0000";

/** Whether `value` (a string, or a JSON array or object, however deep) holds a NUL in a string or a key. */
function holdsNul(value: unknown): boolean {
  const stack = [value]; // no recursion: a 64 KiB body can nest thousands of levels deep
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      if (v.includes(NUL)) return true;
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
      for (const [k, x] of Object.entries(v)) {
        if (k.includes(NUL)) return true;
        stack.push(x);
      }
    }
  }
  return false;
}

/**
 * The parameter whose value holds a NUL: a path or query parameter, or a body field (the top-level field holding
 * it; `body` for a key, a bare string or an array), or undefined when none does.
 */
export function nulParam(input: { params?: unknown; query?: unknown; body?: unknown }): string | undefined {
  for (const [source, values] of [
    ["path", input.params],
    ["query", input.query],
  ] as const) {
    if (values === null || typeof values !== "object") continue;
    // for…in over own keys: no entries array per request (the hot check runs this on every call).
    for (const k in values) {
      if (!Object.hasOwn(values, k)) continue;
      if (k.includes(NUL)) return source;
      const v = (values as Record<string, unknown>)[k];
      if (typeof v === "string" ? v.includes(NUL) : holdsNul(v)) return k;
    }
  }
  const body = input.body;
  if (body === null || typeof body !== "object" || Array.isArray(body)) return holdsNul(body) ? "body" : undefined;
  if (Object.getPrototypeOf(body) !== Object.prototype) return undefined;
  for (const [k, v] of Object.entries(body)) {
    if (k.includes(NUL)) return "body";
    if (holdsNul(v)) return k;
  }
  return undefined;
}

/** Refuses any request with a NUL in a path, query or JSON body value: a 400 naming the parameter. */
export function nulGuard() {
  return new Elysia({ name: "nul-guard" }).onTransform({ as: "global" }, ({ params, query, body }) => {
    const param = nulParam({ params, query, body });
    if (param !== undefined) {
      throw new InvalidParameterError(param, `${param} must not contain a NUL character (\\u0000)`);
    }
  });
}
