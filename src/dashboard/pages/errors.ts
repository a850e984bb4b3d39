/** How a failed request shows on a page. */
import { ApiError } from "../api";
import { h } from "../dom";

/** A red notice with the API's message. */
export function errorBox(err: unknown): HTMLElement {
  const message =
    err instanceof ApiError
      ? err.status === 403
        ? `${err.message}.`
        : err.message
      : err instanceof Error
        ? err.message
        : String(err);
  return h("div", { class: "notice error", role: "alert" }, message);
}
