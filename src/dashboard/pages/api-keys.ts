/** API keys (wallet sessions only): create with a label (the secret is shown once), list, revoke. */
import { api } from "../api";
import { card, h, replace, table } from "../dom";
import { formatDateTime } from "../format";
import type { CreatedKey, KeyRecord } from "../types";
import type { Page, PageContext } from "./page";
import { errorBox } from "./errors";

async function draw(ctx: PageContext, created: CreatedKey | null): Promise<void> {
  const { credential, root } = ctx;
  const path = `/v0/api_keys/${credential.merchant}`;
  const label = h("input", {
    name: "label",
    placeholder: "Label, e.g. production server",
    maxlength: "200",
    "aria-label": "Label",
  });
  const message = h("div");
  const form = h(
    "form",
    {
      class: "filters",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        try {
          const { data } = await api<CreatedKey>(path, {
            method: "POST",
            body: { label: label.value.trim() || undefined },
          });
          await draw(ctx, data);
        } catch (err) {
          replace(message, errorBox(err));
        }
      },
    },
    label,
    h("button", { class: "button", type: "submit" }, "Create key"),
  );
  const shown = created
    ? h(
        "div",
        { class: "notice success", role: "status" },
        h("p", null, h("strong", null, "Copy this key now: it will not be shown again.")),
        h("code", { class: "secret", dataset: { secret: "" } }, created.key),
        h(
          "button",
          {
            class: "button secondary",
            type: "button",
            onclick: (e: Event) => {
              void navigator.clipboard?.writeText(created.key);
              (e.target as HTMLButtonElement).textContent = "Copied";
            },
          },
          "Copy",
        ),
      )
    : null;
  const { data: keys } = await api<KeyRecord[]>(path);
  const rows = keys
    .slice()
    .reverse()
    .map((k) =>
      h(
        "tr",
        { dataset: { keyId: k.id } },
        h("td", null, k.label ?? h("span", { class: "muted" }, "No label")),
        h("td", { class: "mono" }, `${k.prefix}…`),
        h("td", null, formatDateTime(k.created_at)),
        h("td", null, formatDateTime(k.last_used_at)),
        h(
          "td",
          null,
          k.revoked_at
            ? h("span", { class: "pill pill-cancelled" }, "Revoked")
            : h(
                "button",
                {
                  class: "button danger",
                  type: "button",
                  onclick: async () => {
                    if (!confirm(`Revoke ${k.label ?? k.prefix}? Requests with it will fail at once.`)) return;
                    try {
                      await api(`${path}/${k.id}`, { method: "DELETE" });
                      await draw(ctx, null);
                    } catch (err) {
                      replace(message, errorBox(err));
                    }
                  },
                },
                "Revoke",
              ),
        ),
      ),
    );
  replace(
    root,
    h("div", { class: "page-head" }, h("h1", null, "API keys")),
    card(
      "Create a key",
      h("p", { class: "muted small" }, "A key reads this merchant's data from your servers. Keep it secret."),
      form,
      message,
      shown,
    ),
    card("Keys", table(["Label", "Key", "Created", "Last used", ""], rows, "No keys yet.")),
  );
}

export const apiKeysPage: Page = {
  id: "keys",
  title: "API keys",
  sessionOnly: true,
  render: (ctx) => draw(ctx, null),
};
