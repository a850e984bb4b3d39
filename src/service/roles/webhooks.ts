import { createDispatcher, dispatcherConfig } from "../../webhooks/dispatcher";
import type { Role } from "../context";

/** Role `webhooks`: delivers the event log to merchants' endpoints (several processes share the work). */
export const webhooksRole: Role = {
  name: "webhooks",
  async start({ config, db, notifier, log, service, metrics }) {
    const dispatcher = createDispatcher({
      sql: db.sql,
      log,
      notifier,
      config: dispatcherConfig(config),
      onAttempt: metrics?.webhookAttempt,
    });
    await dispatcher.start();
    service.webhooks = dispatcher;
    return () => dispatcher.stop();
  },
};
