/**
 * Webhooks: endpoints (create, send a test, rotate the secret, disable or enable, delete) and each endpoint's
 * delivery log with redeliver. Every action is a call of the `/v0/webhook_endpoints` and `/v0/events` routes.
 */
import { api, nextCursor, qs } from "../api";
import { card, h, replace, table } from "../dom";
import { formatDateTime, shortHex } from "../format";
import type { DeliveryAttempt, WebhookEndpoint } from "../types";
import { errorBox } from "./errors";
import type { Page, PageContext } from "./page";

/** A secret shown once, with a copy button. */
function secretNotice(title: string, secret: string): HTMLElement {
  return h(
    "div",
    { class: "notice success", role: "status" },
    h("p", null, h("strong", null, title)),
    h("code", { class: "secret", dataset: { secret: "" } }, secret),
    h(
      "button",
      {
        class: "button secondary",
        type: "button",
        onclick: (e: Event) => {
          void navigator.clipboard?.writeText(secret);
          (e.target as HTMLButtonElement).textContent = "Copied";
        },
      },
      "Copy",
    ),
  );
}

/** Runs an action, then redraws; a failure shows in `message`. */
function action(message: HTMLElement, run: () => Promise<void>) {
  return async () => {
    try {
      await run();
    } catch (err) {
      replace(message, errorBox(err));
    }
  };
}

/** The create form: URL, event types (comma-separated, empty for every type) and a description. */
function createForm(ctx: PageContext, path: string, message: HTMLElement): HTMLFormElement {
  const url = h("input", { name: "url", type: "url", placeholder: "https://example.com/webhooks", required: true });
  const types = h("input", { name: "event_types", placeholder: "Event types, e.g. charge.succeeded (empty: all)" });
  const description = h("input", { name: "description", placeholder: "Description", maxlength: "500" });
  return h(
    "form",
    {
      class: "filters",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        const list = types.value
          .split(",")
          .map((t) => t.trim())
          .filter(Boolean);
        await action(message, async () => {
          const body = {
            url: url.value.trim(),
            ...(list.length ? { event_types: list } : {}),
            ...(description.value.trim() ? { description: description.value.trim() } : {}),
          };
          const { data } = await api<WebhookEndpoint & { secret: string }>(path, { method: "POST", body });
          await drawList(
            ctx,
            secretNotice("Signing secret of the new endpoint: it will not be shown again.", data.secret),
          );
        })();
      },
    },
    url,
    types,
    description,
    h("button", { class: "button", type: "submit" }, "Add endpoint"),
  );
}

/** One endpoint's row with its actions. */
function endpointRow(ctx: PageContext, path: string, e: WebhookEndpoint, message: HTMLElement) {
  const at = `${path}/${e.id}`;
  const redraw = (notice?: HTMLElement) => drawList(ctx, notice ?? null);
  const status = e.enabled
    ? h("span", { class: "pill pill-active" }, "Enabled")
    : h("span", { class: "pill pill-cancelled", title: e.disabled_reason ?? "" }, "Disabled");
  const button = (label: string, cls: string, run: () => Promise<void>) =>
    h("button", { class: `button small ${cls}`, type: "button", onclick: action(message, run) }, label);
  return h(
    "tr",
    { dataset: { endpointId: e.id } },
    h(
      "td",
      null,
      h("a", { href: `#/webhooks/${e.id}` }, e.url),
      e.description ? h("div", { class: "muted small" }, e.description) : null,
    ),
    h("td", null, e.event_types.join(", ")),
    h("td", null, status),
    h("td", null, formatDateTime(e.created_at)),
    h(
      "td",
      { class: "actions" },
      button("Send test", "secondary", async () => {
        const { data } = await api<DeliveryAttempt>(`${at}/test`, { method: "POST" });
        const ok = data.status === "succeeded";
        replace(
          message,
          h(
            "div",
            { class: `notice ${ok ? "success" : "error"}`, role: "status" },
            `Test delivery ${data.status}${data.response_status ? ` (HTTP ${data.response_status})` : ""}` +
              (data.error ? `: ${data.error}` : ""),
          ),
        );
      }),
      button("Rotate secret", "secondary", async () => {
        if (!confirm("Rotate the signing secret? The old one keeps signing alongside the new one for 24 hours."))
          return;
        const { data } = await api<{ secret: string }>(`${at}/rotate_secret`, { method: "POST" });
        await redraw(secretNotice("New signing secret: it will not be shown again.", data.secret));
      }),
      button(e.enabled ? "Disable" : "Enable", "secondary", async () => {
        await api(at, { method: "PATCH", body: { enabled: !e.enabled } });
        await redraw();
      }),
      button("Delete", "danger", async () => {
        if (!confirm(`Delete the endpoint ${e.url}? Its pending deliveries are cancelled.`)) return;
        await api(at, { method: "DELETE" });
        await redraw();
      }),
    ),
  );
}

/** The endpoints list with the create form. */
async function drawList(ctx: PageContext, notice: HTMLElement | null): Promise<void> {
  const path = `/v0/webhook_endpoints/${ctx.credential.merchant}`;
  const message = h("div");
  const { data: endpoints } = await api<WebhookEndpoint[]>(path);
  const rows = endpoints.map((e) => endpointRow(ctx, path, e, message));
  replace(
    ctx.root,
    h("div", { class: "page-head" }, h("h1", null, "Webhooks")),
    card(
      "Add an endpoint",
      h(
        "p",
        { class: "muted small" },
        "Deliveries are signed with Standard Webhooks headers (webhook-id, webhook-timestamp, webhook-signature).",
      ),
      createForm(ctx, path, message),
      notice,
    ),
    message,
    card("Endpoints", table(["URL", "Events", "Status", "Created", ""], rows, "No endpoints yet.")),
  );
}

/** One endpoint's delivery log, newest first, with a status filter, paging and redeliver. */
async function drawDeliveries(ctx: PageContext, endpointId: string): Promise<void> {
  const merchant = ctx.credential.merchant;
  const status = ctx.query.get("status") ?? "";
  const after = ctx.query.get("starting_after");
  const message = h("div");
  const { data: endpoint } = await api<WebhookEndpoint>(`/v0/webhook_endpoints/${merchant}/${endpointId}`);
  const { data: attempts, headers } = await api<DeliveryAttempt[]>(
    `/v0/webhook_endpoints/${merchant}/${endpointId}/deliveries${qs({ limit: 50, status: status || undefined, starting_after: after })}`,
  );
  const next = nextCursor(headers);
  const filter = h(
    "select",
    {
      "aria-label": "Status",
      onchange: (e: Event) =>
        ctx.navigate(`#/webhooks/${endpointId}${qs({ status: (e.target as HTMLSelectElement).value || undefined })}`),
    },
    ...["", "pending", "succeeded", "failed"].map((s) =>
      h("option", { value: s, selected: s === status }, s ? s[0]!.toUpperCase() + s.slice(1) : "All statuses"),
    ),
  );
  const rows = attempts.map((a) =>
    h(
      "tr",
      { dataset: { deliveryId: a.id } },
      h("td", { class: "mono", title: a.event_id }, shortHex(a.event_id, 10, 6)),
      h("td", null, a.event_type),
      h("td", null, String(a.attempt)),
      h(
        "td",
        null,
        h(
          "span",
          { class: `pill pill-${a.status === "succeeded" ? "active" : a.status === "failed" ? "fail" : "pending"}` },
          a.status,
        ),
      ),
      h(
        "td",
        null,
        a.response_status === null ? "—" : String(a.response_status),
        a.error ? h("div", { class: "muted small" }, a.error) : null,
      ),
      h("td", null, a.duration_ms === null ? "—" : `${a.duration_ms} ms`),
      h("td", null, formatDateTime(a.created_at)),
      h(
        "td",
        null,
        h(
          "button",
          {
            class: "button small secondary",
            type: "button",
            onclick: action(message, async () => {
              await api(`/v0/events/${merchant}/${a.event_id}/redeliver`, {
                method: "POST",
                body: { endpoint_id: endpointId },
              });
              replace(
                message,
                h("div", { class: "notice success", role: "status" }, `Redelivery of ${a.event_id} queued.`),
              );
            }),
          },
          "Redeliver",
        ),
      ),
    ),
  );
  replace(
    ctx.root,
    h(
      "div",
      { class: "page-head" },
      h("h1", null, "Deliveries"),
      h("a", { href: "#/webhooks", class: "button secondary" }, "All endpoints"),
    ),
    card(
      endpoint.url,
      h("div", { class: "filters" }, filter),
      message,
      table(["Event", "Type", "Attempt", "Status", "Response", "Duration", "At", ""], rows, "No deliveries yet."),
    ),
    next
      ? h(
          "a",
          {
            class: "button secondary",
            href: `#/webhooks/${endpointId}${qs({ status: status || undefined, starting_after: next })}`,
          },
          "Older",
        )
      : null,
  );
}

export const webhooksPage: Page = {
  id: "webhooks",
  title: "Webhooks",
  render: (ctx) => (ctx.args[0] ? drawDeliveries(ctx, ctx.args[0]) : drawList(ctx, null)),
};
