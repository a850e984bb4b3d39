/** The production SIWE rule: an api role refuses to start without SIWE_DOMAIN unless SIWE_TRUST_HOST=1. */
import { describe, expect, test } from "bun:test";
import { ConfigError, loadConfig, requireRoleSettings } from "../../src/common/config";
import { startService } from "../../src/service";

describe("SIWE_DOMAIN in production", () => {
  test("an api role in production needs SIWE_DOMAIN or SIWE_TRUST_HOST=1", () => {
    const prod = { NODE_ENV: "production", ROLES: "api" };
    expect(() => requireRoleSettings(loadConfig(prod))).toThrow(ConfigError);
    expect(() => requireRoleSettings(loadConfig(prod))).toThrow("SIWE_DOMAIN is required in production");
    expect(() => requireRoleSettings(loadConfig({ ...prod, SIWE_DOMAIN: "api.example.com" }))).not.toThrow();
    expect(() => requireRoleSettings(loadConfig({ ...prod, SIWE_TRUST_HOST: "1" }))).not.toThrow();
    expect(() => loadConfig({ ...prod, SIWE_TRUST_HOST: "yes" })).toThrow("expected 0 or 1");
  });

  test("outside production, or without the api role, the host stays the default (start-up only warns)", () => {
    expect(() => requireRoleSettings(loadConfig({ ROLES: "api" }))).not.toThrow();
    expect(() => requireRoleSettings(loadConfig({ NODE_ENV: "development", ROLES: "api" }))).not.toThrow();
    expect(() => requireRoleSettings(loadConfig({ NODE_ENV: "production", ROLES: "webhooks" }))).not.toThrow();
  });

  test("startService refuses before opening anything", async () => {
    const start = startService(loadConfig({ NODE_ENV: "production", ROLES: "api", PORT: "0", LOG_LEVEL: "error" }));
    await expect(start).rejects.toThrow("SIWE_DOMAIN is required in production");
  });
});
