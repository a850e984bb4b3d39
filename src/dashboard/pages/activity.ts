/** Activity: charges, failures and refills with type/token/since filters, paging and CSV download. */
import { api, downloadCsv, nextCursor, qs } from "../api";
import { card, h, replace, table } from "../dom";
import { formatAmount, formatDateTime, shortHex } from "../format";
import type { Activity } from "../types";
import type { Page } from "./page";
import { errorBox } from "./errors";

const PAGE_SIZE = 50;
const TYPES = ["CHARGE", "FAIL", "REFILL"] as const;

export const activityPage: Page = {
  id: "activity",
  title: "Activity",
  async render({ credential, root, query, navigate }) {
    const type = TYPES.find((t) => t === query.get("type"));
    const token = query.get("token") ?? "";
    const sinceDay = /^\d{4}-\d{2}-\d{2}$/.test(query.get("since") ?? "") ? query.get("since")! : "";
    const after = query.get("after") ?? undefined;
    const filters = { type, token: token || undefined, since: sinceDay ? `${sinceDay}T00:00:00Z` : undefined };
    const typeSelect = h(
      "select",
      { name: "type", "aria-label": "Type" },
      h("option", { value: "" }, "All types"),
      TYPES.map((t) =>
        h("option", { value: t, selected: t === type }, t === "FAIL" ? "Failed" : t[0] + t.slice(1).toLowerCase()),
      ),
    );
    const tokenInput = h("input", {
      name: "token",
      placeholder: "Token (e.g. USDC)",
      value: token,
      "aria-label": "Token",
      size: 12,
    });
    const sinceInput = h("input", { name: "since", type: "date", value: sinceDay, "aria-label": "Since" });
    const apply = () =>
      navigate(`#/activity${qs({ type: typeSelect.value, token: tokenInput.value.trim(), since: sinceInput.value })}`);
    const form = h(
      "form",
      { class: "filters", onsubmit: (e: Event) => (e.preventDefault(), apply()) },
      typeSelect,
      tokenInput,
      sinceInput,
      h("button", { class: "button secondary", type: "submit" }, "Filter"),
    );
    typeSelect.addEventListener("change", apply);
    sinceInput.addEventListener("change", apply);
    const message = h("div");
    const csv = h(
      "button",
      {
        class: "button secondary",
        type: "button",
        onclick: () =>
          downloadCsv(`/v0/activity/${credential.merchant}${qs({ ...filters, format: "csv" })}`, "activity.csv").catch(
            (err) => replace(message, errorBox(err)),
          ),
      },
      "Download CSV",
    );
    const body = h("div", null, h("p", { class: "muted" }, "Loading…"));
    replace(root, h("div", { class: "page-head" }, h("h1", null, "Activity"), csv), card(null, form, message, body));
    const { data, headers } = await api<Activity[]>(
      `/v0/activity/${credential.merchant}${qs({ ...filters, order: "desc", limit: PAGE_SIZE, starting_after: after })}`,
    );
    const next = nextCursor(headers);
    const rows = data.map((a) =>
      h(
        "tr",
        { dataset: { type: a.type } },
        h("td", null, formatDateTime(a.timestamp)),
        h("td", null, h("span", { class: `pill pill-${a.type.toLowerCase()}` }, a.type === "FAIL" ? "FAILED" : a.type)),
        h(
          "td",
          { class: "num" },
          a.type === "FAIL" ? "—" : formatAmount(a.amount_charged, a.token_decimals, a.currency),
        ),
        h("td", { class: "num" }, a.fee_paid === null ? "—" : formatAmount(a.fee_paid, a.token_decimals, a.currency)),
        h("td", null, a.reason ?? ""),
        h(
          "td",
          null,
          h("a", { href: `#/subscriptions/${a.allocation_id.split(":")[2]}` }, a.allocation_id.split(":")[2]),
        ),
        h("td", { class: "mono", title: a.tx_hash }, shortHex(a.tx_hash, 10, 6)),
      ),
    );
    replace(
      body,
      table(["Date", "Type", "Amount", "Fee", "Reason", "Subscription", "Transaction"], rows, "No activity matches."),
      h(
        "div",
        { class: "pager" },
        h("span", { class: "muted small" }, `${data.length} shown, newest first`),
        after
          ? h("button", { class: "button secondary", type: "button", onclick: () => history.back() }, "Previous")
          : null,
        next
          ? h(
              "button",
              {
                class: "button secondary",
                type: "button",
                onclick: () => navigate(`#/activity${qs({ type, token, since: sinceDay, after: next })}`),
              },
              "Next",
            )
          : null,
      ),
    );
  },
};
