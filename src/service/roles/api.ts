import { randomSecret } from "../../auth/hash";
import { ConfigError } from "../../common/config";
import { writeControlFile } from "../../db/control-file";
import { createApp } from "../../http/app";
import { startControlListener } from "../../http/features/control";
import type { Role } from "../context";
import { dispatcherConfig } from "../../webhooks/dispatcher";

/** Loopback URL for a bound host: wildcard binds are reached through 127.0.0.1. */
function baseUrl(host: string, port: number): string {
  const h = host === "0.0.0.0" || host === "::" || host === "" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host;
  return `http://${h}:${port}`;
}

/**
 * Role `api`: the HTTP API. On the embedded database (one process only) it also runs the control endpoint that
 * `bun run apikey` uses, on a listener of its own on the loopback interface, never the public one.
 */
export const apiRole: Role = {
  name: "api",
  async start({ config, opts, db, readDb, notifier, chains, log, service, metrics }) {
    const app = createApp({
      sql: db.sql,
      readSql: readDb?.sql,
      config,
      chains,
      notifier,
      log,
      observeRequest: metrics?.http,
      sharedLimits: db.kind === "postgres",
    });
    try {
      app.listen({ port: config.PORT, hostname: config.HOST });
    } catch (err) {
      throw new ConfigError(
        `PORT ${config.PORT} on HOST ${config.HOST} cannot be listened on (in use?): ${String(err)}`,
      );
    }
    const port = app.server?.port ?? config.PORT;
    let stopControl = async () => {};
    if (db.kind === "pglite" && db.dataDir) {
      const token = randomSecret("ctl_");
      const control = startControlListener({
        sql: db.sql,
        token,
        log,
        webhooks: dispatcherConfig(config),
        defaultChainId: chains.defaultChainId,
        config,
      });
      const removeControlFile = writeControlFile(db.dataDir, { pid: process.pid, url: control.url, token });
      stopControl = async () => {
        removeControlFile();
        await control.stop();
      };
    }
    service.url = baseUrl(config.HOST, port);
    service.port = port;
    const drainMs = opts.drainTimeoutMs ?? 10_000;
    return async () => {
      await stopControl();
      // Stop accepting; let in-flight requests finish, but not forever.
      const drained = app.stop(false).then(() => true);
      const timedOut = Bun.sleep(drainMs).then(() => false);
      if (!(await Promise.race([drained, timedOut]))) await app.stop(true);
    };
  },
};
