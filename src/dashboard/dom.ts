/** A tiny element builder: text always goes through textContent, never innerHTML. */

/** A child: a node, text, or nothing. */
export type Child = Node | string | number | null | undefined | false;

/** Attributes: `class`, `on<event>` handlers, `dataset` entries, and plain attributes. */
export type Attrs = Record<string, unknown> & { class?: string; dataset?: Record<string, string> };

/** Creates an element with attributes and children. */
export function h<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Attrs | null = null,
  ...children: (Child | Child[])[]
): HTMLElementTagNameMap[K] {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") el.className = String(v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else if (k.startsWith("on") && typeof v === "function") el.addEventListener(k.slice(2), v as EventListener);
    else if (k === "value" && "value" in el) (el as HTMLInputElement).value = String(v);
    else el.setAttribute(k, v === true ? "" : String(v));
  }
  append(el, children);
  return el;
}

/** Appends children (nested arrays flattened, empty ones skipped). */
export function append(el: Node, children: (Child | Child[])[]): void {
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
  }
}

/** Replaces an element's children. */
export function replace(el: Element, ...children: (Child | Child[])[]): void {
  el.replaceChildren();
  append(el, children);
}

/** A card: white box with a title. */
export function card(title: string | null, ...children: (Child | Child[])[]): HTMLElement {
  return h("section", { class: "card" }, title ? h("h2", null, title) : null, ...children);
}

/** A table that scrolls horizontally on narrow screens. */
export function table(head: string[], rows: HTMLTableRowElement[], empty = "Nothing here yet."): HTMLElement {
  const body = rows.length ? rows : [h("tr", null, h("td", { class: "empty", colspan: String(head.length) }, empty))];
  return h(
    "div",
    { class: "table-wrap" },
    h(
      "table",
      null,
      h(
        "thead",
        null,
        h(
          "tr",
          null,
          head.map((c) => h("th", null, c)),
        ),
      ),
      h("tbody", null, body),
    ),
  );
}
