/**
 * One input rule for every route: no path value, query value or string of a JSON body (field names included) may
 * hold text Postgres cannot store as sent: a NUL character (U+0000), which no Postgres text can hold (a 500 wherever
 * it reached SQL), or a lone UTF-16 surrogate (`"\ud800"` is valid JSON but no Unicode character; it would be stored
 * as U+FFFD, so the API would keep something other than what it answered for). Instead the request is a 400 naming
 * the parameter, before any route runs.
 */
import { Elysia } from "elysia";
import { InvalidParameterError } from "../errors";

const NUL = "\u0000";
// String.prototype.isWellFormed (ES2024): false when a lone surrogate is in the string; ~9 ns for an address, a
// seventh of a `/\p{Cs}/u` test (this runs on every query value of every request). TypeScript's lib here predates it.
const wellFormed = (s: string) => (s as unknown as { isWellFormed(): boolean }).isWellFormed();

/** What is wrong with a text value, if anything. */
export type TextFlaw = "nul" | "surrogate";

const flawOf = (s: string): TextFlaw | undefined => (s.includes(NUL) ? "nul" : wellFormed(s) ? undefined : "surrogate");

/** The flaw of `value` (a string, or a JSON array or object, however deep) in a string or a key. */
function flawIn(value: unknown): TextFlaw | undefined {
  const stack = [value]; // no recursion: a 64 KiB body can nest thousands of levels deep
  while (stack.length > 0) {
    const v = stack.pop();
    if (typeof v === "string") {
      const f = flawOf(v);
      if (f) return f;
    } else if (Array.isArray(v)) {
      for (const x of v) stack.push(x);
    } else if (v !== null && typeof v === "object" && Object.getPrototypeOf(v) === Object.prototype) {
      for (const [k, x] of Object.entries(v)) {
        const f = flawOf(k);
        if (f) return f;
        stack.push(x);
      }
    }
  }
  return undefined;
}

/**
 * The parameter holding unstorable text and its flaw: a path or query parameter, or a body field (the top-level field
 * holding it; `body` for a key, a bare string or an array), or undefined when none does.
 */
export function flawedParam(input: {
  params?: unknown;
  query?: unknown;
  body?: unknown;
}): { param: string; flaw: TextFlaw } | undefined {
  for (const [source, values] of [
    ["path", input.params],
    ["query", input.query],
  ] as const) {
    if (values === null || typeof values !== "object") continue;
    // for…in over own keys: no entries array per request (the hot check runs this on every call).
    for (const k in values) {
      if (!Object.hasOwn(values, k)) continue;
      const keyFlaw = flawOf(k);
      if (keyFlaw) return { param: source, flaw: keyFlaw };
      const v = (values as Record<string, unknown>)[k];
      const f = typeof v === "string" ? flawOf(v) : flawIn(v);
      if (f) return { param: k, flaw: f };
    }
  }
  const body = input.body;
  if (body === null || typeof body !== "object" || Array.isArray(body)) {
    const f = flawIn(body);
    return f ? { param: "body", flaw: f } : undefined;
  }
  if (Object.getPrototypeOf(body) !== Object.prototype) return undefined;
  for (const [k, v] of Object.entries(body)) {
    const keyFlaw = flawOf(k);
    if (keyFlaw) return { param: "body", flaw: keyFlaw };
    const f = flawIn(v);
    if (f) return { param: k, flaw: f };
  }
  return undefined;
}

const MESSAGES: Record<TextFlaw, string> = {
  nul: "must not contain a NUL character (\\u0000)",
  surrogate: "must be well-formed Unicode: a lone surrogate (\\ud800–\\udfff) is not a character",
};

/** Refuses any request with unstorable text in a path, query or JSON body value: a 400 naming the parameter. */
export function textGuard() {
  return new Elysia({ name: "text-guard" }).onTransform({ as: "global" }, ({ params, query, body }) => {
    const found = flawedParam({ params, query, body });
    if (found !== undefined) {
      throw new InvalidParameterError(found.param, `${found.param} ${MESSAGES[found.flaw]}`);
    }
  });
}
