/** A seeded database plus the real app over it, for the HTTP tests of test/api. */
import { createTestDb } from "./db";
import { seedFixture, CHAIN_A, type Fixture } from "./seed";
import { createApp } from "../src/http/app";
import { loadConfig, type Config } from "../src/common/config";
import { createChainRegistry } from "../src/chain/clients";
import { createNotifier } from "../src/db/notify";
import type { Db } from "../src/db/client";

/** The admin key every seeded app accepts. */
export const ADMIN_KEY = "test-admin-key-0123456789abcdef";

/** Authorization header of the admin key. */
export const admin = { authorization: `Bearer ${ADMIN_KEY}` };

/** A parsed HTTP response. */
export type Res = { status: number; headers: Headers; body: any };

/** A running seeded app. */
export type SeededApp = {
  db: Db;
  fixture: Fixture;
  config: Config;
  app: ReturnType<typeof createApp>;
  /** GET `path` (with the admin key unless other headers are given). */
  get: (path: string, headers?: Record<string, string>) => Promise<Res>;
  close: () => Promise<void>;
};

/** Builds a config the way the service does, from an environment. */
export function testConfig(env: Record<string, string> = {}): Config {
  return loadConfig({
    CHAIN_ID: String(CHAIN_A),
    ADMIN_API_KEY: ADMIN_KEY,
    RATE_LIMIT_PER_MINUTE: "1000000",
    SIWE_DOMAIN: "localhost",
    ...env,
  });
}

/** Sends one request through `app.handle` and parses the JSON body. */
export async function request(
  app: { handle: (r: Request) => Promise<Response> | Response },
  path: string,
  headers: Record<string, string> = admin,
): Promise<Res> {
  const res = await app.handle(new Request(`http://localhost${path}`, { headers }));
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON (the docs page)
  }
  return { status: res.status, headers: res.headers, body };
}

/** A fresh database with the standard fixture and the app over it. */
export async function startSeededApp(
  env: Record<string, string> = {},
  deps: { now?: () => number } = {},
): Promise<SeededApp> {
  const db = await createTestDb();
  try {
    const fixture = await seedFixture(db.sql);
    const config = testConfig(env);
    const chains = await createChainRegistry(config);
    const app = createApp({ sql: db.sql, config, chains, notifier: createNotifier(db), now: deps.now });
    return {
      db,
      fixture,
      config,
      app,
      get: (path, headers = admin) => request(app, path, headers),
      close: () => db.close(),
    };
  } catch (err) {
    await db.close();
    throw err;
  }
}
