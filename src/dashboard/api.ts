/** The dashboard's client of `/v0`: the credential (sessionStorage), JSON requests and CSV downloads. */

/** How the user signed in: an API key, or a SIWE session token from a wallet. */
export type Credential = { kind: "key" | "session"; token: string; merchant: string };

const STORE = "dashboard.credential";

/** The stored credential, or null. */
export function loadCredential(): Credential | null {
  try {
    const c = JSON.parse(sessionStorage.getItem(STORE) ?? "null") as Credential | null;
    return c && typeof c.token === "string" && /^0x[0-9a-f]{40}$/.test(c.merchant) ? c : null;
  } catch {
    return null;
  }
}

/** Keeps the credential for this tab (sessionStorage: gone when the tab closes). */
export function saveCredential(c: Credential): void {
  sessionStorage.setItem(STORE, JSON.stringify({ ...c, merchant: c.merchant.toLowerCase() }));
}

/** Forgets the credential. */
export function clearCredential(): void {
  sessionStorage.removeItem(STORE);
}

/** An error answered by the API (its envelope), or a network failure (status 0). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly code?: string,
    readonly param?: string,
  ) {
    super(message);
  }
}

/** Called on every 401 (the credential is gone): the app signs out. */
let onUnauthenticated: (message: string) => void = () => {};

/** Sets what happens when a request comes back 401. */
export function setUnauthenticatedHandler(fn: (message: string) => void): void {
  onUnauthenticated = fn;
}

/** A JSON response with its headers. */
export type ApiResponse<T> = { data: T; headers: Headers };

/** Sends a request to the API with the credential as Bearer token; throws ApiError on an error status. */
export async function api<T>(
  path: string,
  opts: { method?: string; body?: unknown; credential?: Credential | null } = {},
): Promise<ApiResponse<T>> {
  const credential = opts.credential === undefined ? loadCredential() : opts.credential;
  const headers: Record<string, string> = { accept: "application/json" };
  if (credential) headers.authorization = `Bearer ${credential.token}`;
  if (opts.body !== undefined) headers["content-type"] = "application/json";
  let res: Response;
  try {
    res = await fetch(path, {
      method: opts.method ?? "GET",
      headers,
      body: opts.body === undefined ? undefined : JSON.stringify(opts.body),
      credentials: "omit",
    });
  } catch {
    throw new ApiError(0, "The API cannot be reached. Check your connection and retry.");
  }
  const text = await res.text();
  let body: any = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch {
    // not JSON
  }
  if (!res.ok) {
    const e = body?.error;
    const err = new ApiError(res.status, e?.message ?? `HTTP ${res.status}`, e?.code, e?.param);
    if (res.status === 401 && credential) onUnauthenticated(err.message);
    throw err;
  }
  return { data: body as T, headers: res.headers };
}

/** The `starting_after` of a `Link: <…>; rel="next"` header, or null when there is no next page. */
export function nextCursor(headers: Headers): string | null {
  const link = headers.get("link");
  const m = link && /<([^>]+)>;\s*rel="next"/.exec(link);
  return m ? new URL(m[1], location.origin).searchParams.get("starting_after") : null;
}

/**
 * Downloads `path` (a list route with `format=csv`) as a file: fetched with the Authorization header (a plain link
 * would carry no credential), then saved from a Blob.
 */
export async function downloadCsv(path: string, filename: string): Promise<void> {
  const credential = loadCredential();
  const res = await fetch(path, {
    headers: { accept: "text/csv", ...(credential ? { authorization: `Bearer ${credential.token}` } : {}) },
    credentials: "omit",
  });
  if (!res.ok) {
    let message = `HTTP ${res.status}`;
    try {
      message = (await res.json()).error.message;
    } catch {
      // not the envelope
    }
    throw new ApiError(res.status, message);
  }
  const url = URL.createObjectURL(await res.blob());
  const a = document.createElement("a");
  a.href = url;
  a.download = filename;
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/** Query string of the defined values. */
export function qs(params: Record<string, string | number | undefined | null>): string {
  const p = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") p.set(k, String(v));
  const s = p.toString();
  return s ? `?${s}` : "";
}
