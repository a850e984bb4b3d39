/**
 * The merchant dashboard: sign-in (API key or wallet), a shell with navigation and a freshness badge, and a hash
 * router over the page modules of pages/index.ts. Every number comes from the `/v0` API.
 */
import {
  api,
  ApiError,
  clearCredential,
  loadCredential,
  saveCredential,
  setUnauthenticatedHandler,
  type Credential,
} from "./api";
import { h, replace, type Attrs, type Child } from "./dom";
import { formatAge, shortHex } from "./format";
import { errorBox } from "./pages/errors";
import { pages } from "./pages";
import { injectedProvider, signInWithWallet } from "./siwe";

const app = document.getElementById("app")!;
const FRESHNESS_POLL_MS = 5000;

/**
 * `#key=sk_live_…&merchant=0x…` (printed by `bun run dev`): removed from the address bar at once and kept in memory
 * only; it signs in once the person has confirmed the merchant (confirmLinkView).
 */
function takeFragmentCredential(): Credential | null {
  const params = new URLSearchParams(location.hash.slice(1));
  const key = params.get("key");
  const merchant = params.get("merchant");
  if (!key) return null;
  history.replaceState(null, "", location.pathname + location.search);
  if (!merchant || !/^0x[0-9a-fA-F]{40}$/.test(merchant)) return null;
  return { kind: "key", token: key, merchant: merchant.toLowerCase() };
}

/**
 * A link can carry anyone's key: signing in with someone else's would show their data and send the person's changes
 * (webhook endpoints, …) to their account. So the key is first checked to read the merchant it names, that full
 * address is shown, and nothing is stored until the person confirms it is theirs.
 */
async function confirmLinkView(c: Credential): Promise<void> {
  try {
    await api(`/v0/subscriptions/${c.merchant}?limit=1`, { credential: c });
  } catch (err) {
    signInView(`The sign-in link did not work: ${err instanceof Error ? err.message : String(err)}.`);
    return;
  }
  const confirm = h(
    "button",
    {
      class: "button wide",
      type: "button",
      dataset: { confirmLink: "" },
      onclick: () => {
        saveCredential(c);
        start();
      },
    },
    "Yes, this is my merchant: sign in",
  );
  const cancel = h(
    "button",
    { class: "button secondary wide", type: "button", onclick: () => signInView() },
    "No, cancel",
  );
  signinPage(
    { class: "card", dataset: { linkConfirm: "" } },
    h("h1", null, "Sign in with this link?"),
    h("p", null, "The link signs you in with an API key of the merchant"),
    h("p", { class: "mono", dataset: { linkMerchant: c.merchant } }, c.merchant),
    h(
      "p",
      { class: "muted small" },
      "Continue only if this is your merchant address. Someone else's link would show you their data, " +
        "and what you change would change their account.",
    ),
    confirm,
    cancel,
  );
}

/** The signed-out page: the brand above one card of `children`. */
function signinPage(card: Attrs, ...children: Child[]): void {
  replace(
    app,
    h(
      "main",
      { class: "signin" },
      h("div", { class: "brand" }, h("span", { class: "logo" }), "Payments"),
      h("section", card, ...children),
    ),
  );
}

function signInView(notice?: string): void {
  const merchant = h("input", {
    name: "merchant",
    placeholder: "0x…",
    autocomplete: "username",
    required: true,
    pattern: "0x[0-9a-fA-F]{40}",
  });
  const key = h("input", {
    name: "key",
    type: "password",
    placeholder: "sk_live_…",
    autocomplete: "current-password",
    required: true,
  });
  const message = h("div", null, notice ? h("div", { class: "notice" }, notice) : null);
  const keyForm = h(
    "form",
    {
      class: "stack",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        const c: Credential = { kind: "key", token: key.value.trim(), merchant: merchant.value.trim().toLowerCase() };
        try {
          // One cheap authenticated read checks the key and that it belongs to this merchant.
          await api(`/v0/subscriptions/${c.merchant}?limit=1`, { credential: c });
          saveCredential(c);
          start();
        } catch (err) {
          replace(message, errorBox(err));
        }
      },
    },
    h("label", null, "Merchant address", merchant),
    h("label", null, "API key", key),
    h("button", { class: "button", type: "submit" }, "Sign in with API key"),
  );
  const provider = injectedProvider();
  const wallet = h(
    "button",
    {
      class: "button secondary wide",
      type: "button",
      disabled: !provider,
      onclick: async () => {
        try {
          saveCredential(await signInWithWallet(provider!));
          start();
        } catch (err) {
          replace(message, errorBox(err));
        }
      },
    },
    "Sign in with Ethereum",
  );
  signinPage(
    { class: "card" },
    h("h1", null, "Sign in to your dashboard"),
    message,
    wallet,
    provider ? null : h("p", { class: "muted small" }, "No browser wallet found: use an API key."),
    h("div", { class: "or" }, "or"),
    keyForm,
  );
}

async function signOut(c: Credential): Promise<void> {
  if (c.kind === "session") await api("/v0/siwe/logout", { method: "POST" }).catch(() => {});
  clearCredential();
  // Drops the page's hash without a hashchange: its route would draw the sign-in form a second time, emptying
  // what the person may already have typed into the first.
  history.replaceState(null, "", location.pathname + location.search);
  signInView("You are signed out.");
}

type ReadyChain = {
  chain_id: number;
  indexed_block: string | null;
  head_seen_at: string | null;
  lag_blocks: string | null;
  progress?: number | null;
  eta_s?: number | null;
};
/** /readyz: the chains at the top when ready, inside the error envelope when not (503). */
type Ready = { chains?: ReadyChain[]; error?: { chains?: ReadyChain[] } };

/** "Syncing 42 % · ETA 3 min" while the index backfills (progress below 1); null otherwise. */
function syncingText(c: ReadyChain | undefined): string | null {
  if (!c || c.progress === null || c.progress === undefined || c.progress >= 1) return null;
  const eta = c.eta_s === null || c.eta_s === undefined ? "" : ` · ETA ${formatAge(c.eta_s * 1000)}`;
  return `Syncing ${Math.floor(c.progress * 100)} %${eta}`;
}

/**
 * The badge: indexed block and how long ago the indexer last saw the chain, or the backfill's progress and ETA;
 * refreshed every few seconds.
 */
function freshnessBadge(): HTMLElement {
  const badge = h("span", { class: "badge", dataset: { state: "unknown" }, title: "Index freshness" }, "Index …");
  let last: { ready: boolean; chain: ReadyChain | undefined } | null = null;
  const draw = () => {
    if (!last) return;
    const c = last.chain;
    const syncing = syncingText(c);
    badge.dataset.state = last.ready ? "ok" : syncing ? "syncing" : "late";
    badge.dataset.block = c?.indexed_block ?? "";
    if (syncing) {
      badge.textContent = syncing;
      return;
    }
    const age = c?.head_seen_at ? ` · ${formatAge(Date.now() - Date.parse(c.head_seen_at))} ago` : "";
    const lag = c?.lag_blocks && c.lag_blocks !== "0" ? ` · ${c.lag_blocks} behind` : "";
    badge.textContent = c?.indexed_block
      ? `Block ${Number(c.indexed_block).toLocaleString("en-US")}${lag}${age}`
      : "Not indexed yet";
  };
  const poll = async () => {
    try {
      const res = await fetch("/readyz", { credentials: "omit" });
      const body = (await res.json()) as Ready;
      last = { ready: res.ok, chain: (body.chains ?? body.error?.chains)?.[0] };
    } catch {
      last = { ready: false, chain: last?.chain };
    }
    draw();
  };
  void poll();
  const timer = setInterval(() => (badge.isConnected ? void poll() : clearInterval(timer)), FRESHNESS_POLL_MS);
  const tick = setInterval(() => (badge.isConnected ? draw() : clearInterval(tick)), 1000);
  return badge;
}

let shell: { main: HTMLElement; nav: HTMLElement; credential: Credential } | null = null;

function buildShell(c: Credential): void {
  const nav = h("nav", { class: "tabs" });
  const main = h("main", { class: "content" });
  replace(
    app,
    h(
      "header",
      { class: "top" },
      h("div", { class: "brand" }, h("span", { class: "logo" }), "Payments"),
      nav,
      h(
        "div",
        { class: "who" },
        freshnessBadge(),
        h("span", { class: "mono merchant", title: c.merchant }, shortHex(c.merchant)),
        h("button", { class: "button secondary small", type: "button", onclick: () => signOut(c) }, "Sign out"),
      ),
    ),
    main,
  );
  shell = { main, nav, credential: c };
}

async function route(): Promise<void> {
  const c = loadCredential();
  if (!c) return signInView();
  if (!shell || shell.credential.token !== c.token) buildShell(c);
  const { main, nav } = shell!;
  const [path, search] = location.hash.replace(/^#\/?/, "").split("?");
  const [id, ...args] = (path ?? "").split("/").filter(Boolean).map(decodeURIComponent);
  const visible = pages.filter((p) => !p.sessionOnly || c.kind === "session");
  const page = visible.find((p) => p.id === id) ?? visible[0]!;
  replace(
    nav,
    visible.map((p) =>
      h(
        "a",
        { href: `#/${p.id}`, class: p === page ? "active" : "", "aria-current": p === page ? "page" : false },
        p.title,
      ),
    ),
  );
  document.title = `${page.title} · Dashboard`;
  main.dataset.page = page.id;
  delete main.dataset.ready;
  const view = h("div", { class: "page" });
  replace(main, view);
  try {
    await page.render({
      credential: c,
      root: view,
      args,
      query: new URLSearchParams(search ?? ""),
      navigate: (hash) => (location.hash = hash),
    });
    // The route just drawn (tests and tools wait for it).
    main.dataset.ready = location.hash || "#/";
  } catch (err) {
    if (err instanceof ApiError && err.status === 401) return;
    view.appendChild(errorBox(err));
  }
}

function start(): void {
  shell = null;
  void route();
}

setUnauthenticatedHandler((message) => {
  clearCredential();
  shell = null;
  signInView(`Signed out: ${message}.`);
});
const linked = takeFragmentCredential();
window.addEventListener("hashchange", () => void route());
if (linked) void confirmLinkView(linked);
else start();
