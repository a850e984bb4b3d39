import { expect, test } from "bun:test";
import { createLogger, maskInLogs } from "../../src/common/log";
import { newSecret } from "../../src/webhooks/secrets";
import { randomSecret } from "../../src/auth/hash";

/** The lines a logger writes for `fields`, as text. */
function logged(msg: string, fields: Record<string, unknown>): string {
  const lines: string[] = [];
  createLogger("debug", (line) => lines.push(line))("info", msg, fields);
  return lines.join("\n");
}

test("webhook secrets, the control token and the admin key never reach a log line, in messages or values", () => {
  const whsec = newSecret();
  const control = randomSecret("ctl_");
  const admin = "an-admin-key-without-any-recognizable-shape";
  maskInLogs(admin);
  const text = logged(`sent with ${whsec} after ${control}`, {
    detail: `secret ${whsec} token ${control}`,
    nested: { url: `http://127.0.0.1:1/?admin=${admin}`, err: new Error(`bad ${admin} and ${whsec}`) },
  });
  for (const secret of [whsec, whsec.slice(6), control, control.slice(4), admin]) expect(text).not.toContain(secret);
  expect(text).toContain("whsec_***");
  expect(text).toContain("ctl_***");
  expect(text).toContain("?admin=***");
  // Ordinary text is left alone.
  expect(logged("indexed", { block: "12", note: "whsec_ is the prefix" })).toContain('"note":"whsec_ is the prefix"');
});
