/** Counts and times every request by route template (never the raw path: bounded label values), method and status. */
import { Elysia } from "elysia";

/** Reports one answered request. */
export type RequestObserver = (route: string, method: string, status: number, seconds: number) => void;

/** The plugin; without an observer it adds nothing. */
export function requestMetrics(observe?: RequestObserver) {
  const app = new Elysia({ name: "request-metrics" });
  if (!observe) return app;
  const started = new WeakMap<Request, number>();
  return app
    .onRequest(({ request }) => {
      started.set(request, performance.now());
    })
    .onAfterResponse({ as: "global" }, (ctx) => {
      const { request, set } = ctx;
      const t0 = started.get(request);
      if (t0 === undefined) return;
      const route = (ctx as { route?: string }).route || "unmatched";
      const response = (ctx as { responseValue?: unknown }).responseValue;
      const status = response instanceof Response ? response.status : typeof set.status === "number" ? set.status : 200;
      observe(route, request.method, status, (performance.now() - t0) / 1000);
    });
}
