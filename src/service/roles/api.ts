import { randomSecret } from "../../auth/hash";
import { writeControlFile } from "../../db/control-file";
import { createApp } from "../../http/app";
import { controlRoutes } from "../../http/features/control";
import type { Role } from "../context";

/** Loopback URL for a bound host: wildcard binds are reached through 127.0.0.1. */
function baseUrl(host: string, port: number): string {
  const h = host === "0.0.0.0" || host === "::" || host === "" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return `http://${h}:${port}`;
}

/** Role `api`: the HTTP API; on the embedded database also the control endpoint `bun run apikey` uses. */
export const apiRole: Role = {
  name: "api",
  async start({ config, opts, db, notifier, chains, service }) {
    const app = createApp({ sql: db.sql, config, chains, notifier });
    // The embedded database admits one process: `bun run apikey` then manages keys through this one.
    const controlDir = db.kind === "pglite" ? db.dataDir : undefined;
    const controlToken = controlDir ? randomSecret("ctl_") : null;
    if (controlToken) app.use(controlRoutes({ sql: db.sql, token: controlToken }));
    app.listen({ port: config.PORT, hostname: config.HOST });
    const port = app.server?.port ?? config.PORT;
    const removeControlFile =
      controlDir && controlToken
        ? writeControlFile(controlDir, { pid: process.pid, url: baseUrl(config.HOST, port), token: controlToken })
        : () => {};
    service.url = baseUrl(config.HOST, port);
    service.port = port;
    const drainMs = opts.drainTimeoutMs ?? 10_000;
    return async () => {
      removeControlFile();
      // Stop accepting; let in-flight requests finish, but not forever.
      const drained = app.stop(false).then(() => true);
      const timedOut = Bun.sleep(drainMs).then(() => false);
      if (!(await Promise.race([drained, timedOut]))) await app.stop(true);
    };
  },
};
